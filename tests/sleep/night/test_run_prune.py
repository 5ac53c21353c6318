"""Nights with nothing to learn do not pile up: only the newest no-task run is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import prepare_demo
from skillopt_sleep.night.entry import NightResult, run_night


@pytest.mark.slow
async def test_only_the_newest_no_task_run_is_kept(tmp_path: Path) -> None:
    setup = prepare_demo(tmp_path)
    # adopt every night, and retire a task once it passed one night: the archive empties
    data = setup.config.model_dump(mode="json")
    data["auto_adopt"] = True
    data["night"]["retire_after_passes"] = 1
    cfg = SleepConfig.model_validate(data)
    first = await run_night(cfg, project=setup.project)
    assert first.accepted and first.run_dir is not None
    solved = await run_night(cfg, project=setup.project)  # everything passes, then retires
    assert solved.result is NightResult.NO_EDITS
    empties = [await run_night(cfg, project=setup.project) for _ in range(3)]
    assert all(o.result is NightResult.NO_TASKS for o in empties)
    kept = sorted(p for p in first.run_dir.parent.iterdir() if p.is_dir())
    assert kept == [first.run_dir, solved.run_dir, empties[-1].run_dir]
    assert (empties[-1].run_dir / "report.md").is_file()
