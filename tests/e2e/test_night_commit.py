"""The last steps of a night are one idempotent commit: a night killed after staging, or
after its state was saved but before ``run.json`` was finished, resumes to one history
entry under its own number, and the next night is numbered after it.

Before: killed after staging, the resumed night never saved the night counter, so the next
night was numbered 1 again; killed after the state save, the resumed night recorded the run
a second time and the chart showed the night twice.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.state import StateStore
from support.sleep_setup import once, write_config

pytestmark = pytest.mark.slow


@pytest.fixture
def setup(tmp_path: Path) -> DemoSetup:
    return prepare_demo(tmp_path)


def _report(stdout: str) -> dict[str, Any]:
    out = json.loads(stdout)
    report: dict[str, Any] = json.loads((Path(out["run_dir"]) / "report.json").read_text())
    return report


@pytest.mark.parametrize("kill_after", ["stage", "commit"])
def test_a_night_killed_in_its_last_steps_is_recorded_once(
    setup: DemoSetup, kill_after: str
) -> None:
    config = write_config(setup)
    killed = once(config, setup.project, kill_after)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (run_json,) = (setup.state_dir / "projects").glob("*/runs/*/run.json")
    assert json.loads(run_json.read_text())["night"] == 1

    resumed = once(config, setup.project)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads(resumed.stdout)["resumed"] is True
    assert _report(resumed.stdout)["night"] == 1

    later = once(config, setup.project)
    assert later.returncode == 0, later.stderr[-2000:]
    report = _report(later.stdout)
    assert report["night"] == 2
    history = StateStore(setup.state_dir).load(setup.project).history
    assert [e.night for e in history] == [1, 2]
    assert len({e.run_id for e in history}) == 2
    assert [p["night"] for p in report["chart"]] == [1, 2]
