"""The run journal and the night report are typed models whose JSON is the one earlier
versions wrote: old run directories load and re-save byte for byte, a journal written by
something else keeps its keys, and a night's report.json has exactly the documented keys."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from skillopt.atomicio import dumps_json
from skillopt.errors import CorruptStateError
from skillopt_sleep.demo import prepare_demo
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.rundir import RUN_JSON, RunDir, RunStatus

T0 = datetime(2026, 11, 25, 2, 0, tzinfo=UTC)

# run.json as the dict-based journal wrote it: a finished, resumed night
OLD_JOURNAL: dict[str, Any] = {
    "schema": "skillopt-sleep-run/1",
    "run_id": "20261125T020000Z-0003",
    "project": "/home/me/project",
    "project_key": "project-0123456789",
    "status": "complete",
    "started_at": "2026-11-25T02:00:00Z",
    "ended_at": "2026-11-25T02:09:30Z",
    "pid": 4242,
    "dry_run": False,
    "config": {"night": {"rounds": 3}, "gate": {"metric": "mixed"}},
    "config_hash": "abc123",
    "stages": [
        {"name": "harvest", "status": "done", "started_at": "2026-11-25T02:00:01Z",
         "seconds": 1.5, "ended_at": "2026-11-25T02:00:02.500Z", "model_calls": 0, "tasks": 7,
         "sessions": 3, "recalled": 2, "backlog": 0},
        {"name": "rollouts", "status": "done", "started_at": "2026-11-25T02:00:02Z",
         "seconds": 60.25, "ended_at": "2026-11-25T02:01:02Z", "model_calls": 42,
         "rollouts": 21},
        {"name": "final", "status": "running", "started_at": "2026-11-25T02:08:00Z",
         "seconds": None},
    ],
    "resumed": [{"at": "2026-11-25T02:05:00Z", "previous_pid": 4100}],
    "outcome": "accepted",
    "reason": "",
    "failed_stage": "",
    "versions": {"my-skill": 4},
    "checkpoint": {"gather": {"n_sessions": 3}, "reflect.r1.skill.f0": {"edits": [], "calls": 1}},
    "night": 12,
    "demo": False,
    "resumable": False,
}  # fmt: skip


def _write_run(tmp_path: Path, journal: dict[str, Any], name: str = OLD_JOURNAL["run_id"]) -> Path:
    run = tmp_path / "runs" / name
    run.mkdir(parents=True)
    (run / RUN_JSON).write_text(dumps_json(journal), encoding="utf-8")
    return run


def test_a_journal_from_before_the_model_re_saves_byte_for_byte(tmp_path: Path) -> None:
    path = _write_run(tmp_path, OLD_JOURNAL)
    before = (path / RUN_JSON).read_bytes()
    run = RunDir.open(path)
    assert run.status is RunStatus.COMPLETE and run.journal.night == 12
    assert run.stage_done("rollouts") and not run.stage_done("final")
    run.save()
    assert (path / RUN_JSON).read_bytes() == before


def test_a_journal_written_by_something_else_loads_and_keeps_its_keys(tmp_path: Path) -> None:
    path = _write_run(
        tmp_path, {"status": "running", "project": "/p", "stage": "sleep"}, name="x-1-test"
    )
    run = RunDir.open(path)
    assert run.run_id == "x-1-test" and run.status is RunStatus.RUNNING
    run.finish(RunStatus.ABORTED, T0, outcome="aborted", reason="stopped")
    saved = json.loads((path / RUN_JSON).read_text())
    assert saved["stage"] == "sleep" and saved["status"] == "aborted"
    assert "night" not in saved and "resumable" not in saved  # never set, never written


def test_a_journal_with_an_unknown_status_is_corrupt_state(tmp_path: Path) -> None:
    path = _write_run(tmp_path, {**OLD_JOURNAL, "status": "sleeping"})
    with pytest.raises(CorruptStateError, match="invalid run journal"):
        RunDir.open(path)


def test_stages_are_journalled_as_before_to_the_millisecond(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "runs", now=T0, project="/p", project_key="p",
                        config={}, config_hash="h", dry_run=False)  # fmt: skip
    run.begin_stage("harvest", T0)
    [running] = json.loads((run.path / RUN_JSON).read_text())["stages"]
    assert running == {"name": "harvest", "status": "running",
                       "started_at": "2026-11-25T02:00:00.000Z", "seconds": None}  # fmt: skip
    run.end_stage("harvest", T0 + timedelta(seconds=2.5), model_calls=3, tasks=7)
    [done] = json.loads((run.path / RUN_JSON).read_text())["stages"]
    assert done == {**running, "status": "done", "ended_at": "2026-11-25T02:00:02.500Z",
                    "seconds": 2.5, "model_calls": 3, "tasks": 7}  # fmt: skip
    assert run.stage_done("harvest")
    saved = json.loads((run.path / RUN_JSON).read_text())
    assert {"night", "demo", "resumable", "spend"}.isdisjoint(saved)


REPORT_KEYS = {
    "accepted", "accepted_edits", "advisories", "archive", "archive_changes", "auto_adopted",
    "baseline", "candidate", "chart", "demo", "dry_run", "ended_at", "estimate",
    "estimate_detail", "failed_stage", "folds", "gate_action", "gate_mode", "harvest", "leaked",
    "ledger", "live_memory", "live_skill", "metric", "models", "n_sessions", "night",
    "no_edit_reasons", "notes", "project", "project_name", "proposal_dir", "proposed_edits",
    "reason", "rejected_edits", "result", "resumable", "resumed", "reused_rollouts", "run_dir",
    "run_id", "schema", "spend", "started_at", "status", "task_deltas", "task_intents", "tasks",
    "test", "trials", "unmatched_edits", "untested_edits",
}  # fmt: skip


@pytest.mark.slow
async def test_a_nights_report_json_has_the_documented_keys(tmp_path: Path) -> None:
    demo = prepare_demo(tmp_path)
    outcome = await run_night(demo.config, project=demo.project, demo=True)
    assert outcome.run_dir is not None
    report = json.loads((outcome.run_dir / "report.json").read_text())
    assert set(report) == REPORT_KEYS
    assert report["schema"] == "skillopt-sleep-report/1" and report["status"] == "complete"
    assert set(report["tasks"]) == {"total", "learnable", "test", "folds", "source", "new",
                                    "recalled"}  # fmt: skip
    assert set(report["harvest"]) == {"backlog", "outside_window", "why_nothing", "notes"}
    assert report["chart"][-1]["label"] == "← tonight"
    assert set(report["chart"][-1]) == {"night", "score", "label", "baseline", "candidate",
                                        "accepted", "rejected", "untested", "tasks"}  # fmt: skip
