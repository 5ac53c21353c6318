"""A rule the tasks of all three project skills need goes to memory, gated on the tasks of
every skill; the tasks routed to the skills record their outcomes and the night's curve."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from skillopt.backends.mock import World
from skillopt_sleep.demo import DemoSetup
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.state import project_dir
from skillopt_sleep.tasks.archive import archive_path
from support.three_skills import SHARED_SESSIONS, SKILLS, three_skills_project

RULES = {r.key: r.text for r in World().rules}


@pytest.fixture
def shared(tmp_path: Path) -> DemoSetup:
    return three_skills_project(tmp_path, SHARED_SESSIONS)


async def _night(setup: DemoSetup) -> dict[str, Any]:
    outcome = await run_night(setup.config, project=setup.project)
    assert outcome.run_dir is not None and outcome.exit_code == 0, outcome.reason
    report: dict[str, Any] = json.loads((outcome.run_dir / "report.json").read_text())
    return report


def _shared_trials(run: Path) -> list[dict[str, Any]]:
    trials: list[dict[str, Any]] = json.loads(next(run.glob("shared/*/trials.json")).read_text())[
        "trials"
    ]
    return trials


@pytest.mark.slow
async def test_a_rule_every_skill_needs_is_staged_in_memory_gated_on_every_skill(
    shared: DemoSetup,
) -> None:
    report = await _night(shared)
    assert report["managed_tasks"] == 0
    rows = {row["name"]: row for row in report["skills"]}
    assert set(rows) == set(SKILLS)
    for row in rows.values():  # the shared rule is in no skill's document
        assert RULES["changelog"] not in row["accepted_edits"], row
    memo = report["shared_memory"]
    assert memo["status"] == "accepted", memo
    assert memo["accepted_edits"] == [RULES["changelog"]]
    # measured on the tasks of every skill, and kept because it helped two or more
    assert sorted(memo["groups"]) == sorted(SKILLS) and len(memo["helped"]) >= 2, memo
    run = Path(report["run_dir"])
    staged = {e["kind"]: e for e in json.loads((run / "proposal/manifest.json").read_text())[
        "entries"]}  # fmt: skip
    memory = (run / staged["memory"]["proposed_file"]).read_text()
    assert RULES["changelog"] in memory
    # gated on the tasks of every skill: its final check measured each skill's tasks
    [final] = [t for t in _shared_trials(run) if t["kind"] == "final"]
    measured = {d["task_id"] for d in final["decision"]["task_deltas"]}
    intents = {r["task_id"]: r["skill"] for r in report["skill_routing"]}
    assert {intents[t] for t in measured} == set(SKILLS)
    assert report["accepted"] and report["candidate"] == 1.0
    markdown = (run / "report.md").read_text()
    assert "Rules your skills share, staged in memory" in markdown


@pytest.mark.slow
async def test_routed_tasks_record_outcomes_and_the_night_is_on_the_curve(
    shared: DemoSetup,
) -> None:
    report = await _night(shared)
    routed = {r["task_id"] for r in report["skill_routing"] if r["skill"]}
    assert len(routed) == len(SHARED_SESSIONS)
    path = archive_path(project_dir(shared.config.state_path(), shared.project))
    with sqlite3.connect(path) as db:
        recorded = {row[0] for row in db.execute("SELECT task_id FROM outcomes")}
        answered = {row[0] for row in db.execute("SELECT task_id FROM sample_answers")}
    assert routed <= recorded and routed <= answered
    [tonight] = [p for p in report["chart"] if p["label"] == "← tonight"]
    assert tonight["score"] is not None and tonight["baseline"] is not None
    assert 0.0 < report["baseline"] < 1.0
