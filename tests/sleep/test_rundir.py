"""The run journal: stage times to the millisecond, and run.json read back as written."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from skillopt_sleep.rundir import RUN_JSON, RunDir, RunStatus


def _run(tmp_path: Path, now: datetime) -> RunDir:
    return RunDir.create(
        tmp_path, now=now, project="p", project_key="k", config={}, config_hash="h",
        dry_run=False,
    )  # fmt: skip


def test_a_stage_shorter_than_a_second_is_timed_to_the_millisecond(tmp_path: Path) -> None:
    start = datetime(2026, 11, 25, 2, 30, 0, 900_000, tzinfo=UTC)
    run = _run(tmp_path, start)
    run.begin_stage("stage", start)
    run.end_stage("stage", start + timedelta(milliseconds=250), model_calls=0)
    run.begin_stage("commit", start + timedelta(seconds=1))
    run.end_stage("commit", start + timedelta(seconds=1), model_calls=0)
    stages = json.loads((run.path / RUN_JSON).read_text())["stages"]
    assert [s["seconds"] for s in stages] == [0.25, 0.0]  # not 1.0 from whole-second stamps
    assert stages[0]["started_at"] == "2026-11-25T02:30:00.900Z"


def test_every_save_is_on_disk_and_a_reopened_run_reads_the_last(tmp_path: Path) -> None:
    start = datetime(2026, 11, 25, 2, 30, tzinfo=UTC)
    run = _run(tmp_path, start)
    for i in range(20):  # quicker than the directory's fsync interval
        run.checkpoint(f"step{i}", {"note": f"token=abcd{i:04d}efgh"})
    run.finish(RunStatus.COMPLETE, start, outcome="accepted")
    again = RunDir.open(run.path)
    assert again.status is RunStatus.COMPLETE
    assert sorted(again.journal.checkpoint) == sorted(f"step{i}" for i in range(20))
    assert "abcd0003efgh" not in (run.path / RUN_JSON).read_text()  # redacted on disk
