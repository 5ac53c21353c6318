"""Quiet nights on a project with skills of its own: once a night learned and its proposals
were adopted, the next night with no new session finds every group (the managed skill's
tasks, each project skill's under its own document and the live memory) passing by the
archive's records and ends after harvest, saying so for each skill. A skill file the user
edited, or a task of one skill that ever answered differently, has the night measure."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from skillopt_sleep.cli import main
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup
from skillopt_sleep.night.entry import NightOutcome, NightResult, run_night
from skillopt_sleep.replay import Docs
from skillopt_sleep.state import project_dir
from skillopt_sleep.tasks.archive import archive_path, open_archive
from skillopt_sleep.tasks.records import Question, SampleAnswer
from support.sleep_setup import write_config
from support.three_skills import QUIET_SESSIONS, SKILLS, skill_text, three_skills_project

QUIET = "quiet night: no new session; every one of the"


@pytest.fixture
def project(tmp_path: Path) -> DemoSetup:
    return three_skills_project(tmp_path, QUIET_SESSIONS)


def _config(setup: DemoSetup, *, drift: int = 0) -> SleepConfig:
    data = setup.config.model_dump(mode="json")
    data["auto_adopt"] = "all"  # every proposal adopted, the project skills' too
    data["night"]["drift_check_calls"] = drift
    return SleepConfig.model_validate(data)


def _report(outcome: NightOutcome) -> dict[str, Any]:
    assert outcome.run_dir is not None
    report: dict[str, Any] = json.loads((outcome.run_dir / "report.json").read_text())
    return report


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    """Every rollout the night and its skills' and shared step's nights recorded."""
    return [
        json.loads(line)
        for path in sorted(run_dir.rglob("rollouts.jsonl"))
        for line in path.read_text().splitlines()
    ]


async def _learned(setup: DemoSetup, cfg: SleepConfig) -> NightOutcome:
    """The first night: every skill learns its rule, the managed night the memory's; all
    adopted, and the staged documents sampled enough for the next night to be quiet."""
    first = await run_night(cfg, project=setup.project)
    assert first.accepted and first.n_sessions > 0
    rows = {row["name"]: row for row in _report(first)["skills"]}
    assert {name: rows[name]["status"] for name in SKILLS} == dict.fromkeys(SKILLS, "accepted")
    return first


@pytest.mark.parametrize("drift", [0, 3])
async def test_the_night_after_the_skills_adoption_is_quiet(
    project: DemoSetup, capsys: pytest.CaptureFixture[str], drift: int
) -> None:
    cfg = _config(project, drift=drift)
    await _learned(project, cfg)
    quiet = await run_night(cfg, project=project.project)
    calls = int(quiet.spend["calls"])
    assert (calls == 0) if drift == 0 else (0 < calls <= 5), quiet.spend
    assert quiet.result is NightResult.NO_EDITS and quiet.exit_code == 0
    assert quiet.reason.startswith(QUIET) and "\n" not in quiet.reason
    assert "under the live documents (your 3 skill(s) too, each on its own tasks)" in quiet.reason
    report = _report(quiet)
    assert report["reason"] == quiet.reason and report["baseline"] == 1.0
    for row in report["skills"]:
        assert row["status"] == "no_edits" and row["reason"].startswith("quiet night"), row
        assert row["baseline"] == row["candidate"] == 1.0 and row["run_dir"] is None
    assert quiet.run_dir is not None and not (quiet.run_dir / "skills").exists()
    markdown = (quiet.run_dir / "report.md").read_text()
    assert quiet.reason in markdown and "| code-search | 4 (4 / 0) | no_edits |" in markdown
    config = write_config(project, extra='auto_adopt = "all"')
    capsys.readouterr()  # the nights' logs
    assert main(["status", "--json", "--config", str(config), "--project",
                 str(project.project)]) == 0  # fmt: skip
    last = json.loads(capsys.readouterr().out)["recent"][-1]
    assert last["outcome"] == "no_edits" and last["reason"] == quiet.reason


async def test_a_skill_file_the_user_edited_is_measured_again(project: DemoSetup) -> None:
    cfg = _config(project)
    await _learned(project, cfg)
    assert (await run_night(cfg, project=project.project)).spend["calls"] == 0
    edited = project.project / ".claude" / "skills" / "bug-fixing" / "SKILL.md"
    edited.write_text(edited.read_text() + "\n- Mention the ticket number.\n")
    night = await run_night(cfg, project=project.project)
    assert not night.reason.startswith("quiet night") and night.spend["calls"] > 0
    rows = {row["name"]: row for row in _report(night)["skills"]}
    assert rows["bug-fixing"]["run_dir"] is not None
    docs = Docs(skill=skill_text(project, "bug-fixing"),
                memory=cfg.live_memory_path(project.project).read_text())  # fmt: skip
    assert night.run_dir is not None
    measured = {
        row["task_id"]
        for row in _rows(night.run_dir)
        if row["fresh"] and f"{row['skill_hash']}.{row['memory_hash']}" == docs.key
    }
    assert len(measured) == rows["bug-fixing"]["tasks"]  # under the edited file, each task


def _archive_rows(cfg: SleepConfig, setup: DemoSetup, docs_hash: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(archive_path(project_dir(cfg.state_path(), setup.project)))
    rows = conn.execute(
        "SELECT task_id, task_hash, docs_hash, answer_key FROM sample_answers WHERE docs_hash = ?",
        (docs_hash,),
    ).fetchall()
    conn.close()
    return rows


def _skill_docs(cfg: SleepConfig, setup: DemoSetup, name: str) -> Docs:
    return Docs(skill=skill_text(setup, name),
                memory=cfg.live_memory_path(setup.project).read_text())  # fmt: skip


async def test_a_task_of_one_skill_that_answered_differently_has_the_night_measure(
    project: DemoSetup,
) -> None:
    cfg = _config(project)
    await _learned(project, cfg)
    assert (await run_night(cfg, project=project.project)).spend["calls"] == 0
    row = _archive_rows(cfg, project, _skill_docs(cfg, project, "code-search").key)[0]
    question = Question(task_id=row[0], task_hash=row[1], docs_hash=row[2], answer_key=row[3])
    path = archive_path(project_dir(cfg.state_path(), project.project))
    with open_archive(path) as archive:  # one of its samples, on some night, failed
        archive.record_answers([SampleAnswer(question=question, sample_id=7, score=0.0)],
                               night=99, run_id="a-noisy-draw", now=datetime.now(UTC))  # fmt: skip
    noisy = await run_night(cfg, project=project.project)
    assert not noisy.reason.startswith("quiet night")
    rows = {r["name"]: r for r in _report(noisy)["skills"]}
    assert rows["code-search"]["run_dir"] is not None
    assert noisy.spend["calls_by_stage"].get("rollout", 0) >= noisy.n_tasks, noisy.spend


async def test_what_the_recheck_drew_is_read_back_by_the_skills_nights(
    project: DemoSetup,
) -> None:
    """A skill the user edited back to its old text, recorded passing once under the edited
    text: the re-check draws its missing samples, they fail, and the night goes on; the
    shared step and the skill's night read those samples back instead of drawing them."""
    cfg = _config(project)
    await _learned(project, cfg)
    edited = project.project / ".claude" / "skills" / "code-search" / "SKILL.md"
    learned = _skill_docs(cfg, project, "code-search")
    edited.write_text(f"---\nname: code-search\ndescription: {SKILLS['code-search']}\n---\n")
    docs = _skill_docs(cfg, project, "code-search")
    path = archive_path(project_dir(cfg.state_path(), project.project))
    answers = [  # as though a night had seen each task pass once under the edited text
        SampleAnswer(question=Question(task_id=r[0], task_hash=r[1], docs_hash=docs.key,
                                       answer_key=r[3]), sample_id=99, score=1.0)
        for r in dict.fromkeys(_archive_rows(cfg, project, learned.key))
    ]  # fmt: skip
    with open_archive(path) as archive:
        archive.record_answers(answers, night=99, run_id="earlier", now=datetime.now(UTC))
    night = await run_night(cfg, project=project.project)
    assert not night.reason.startswith("quiet night")
    assert night.run_dir is not None
    stages = json.loads((night.run_dir / "run.json").read_text())["stages"]
    assert any(s["name"] == "recheck" and s["model_calls"] for s in stages), stages
    drawn = Counter(row["key"] for row in _rows(night.run_dir) if not row["error"])
    assert drawn and max(drawn.values()) == 1, drawn.most_common(3)


@pytest.mark.parametrize("auto_adopt", [True, "all"])
async def test_the_top_up_covers_the_skills_only_when_their_proposals_get_adopted(
    project: DemoSetup, auto_adopt: bool | str
) -> None:
    """`auto_adopt = true` adopts the managed proposal only: the skills' new versions stay
    staged and their tasks run under the present text tomorrow, which fails them, so the
    next night cannot be quiet and no steady sample is worth drawing; with "all" every
    group gets its steady samples."""
    data = _config(project).model_dump(mode="json")
    data["auto_adopt"] = auto_adopt
    first = await run_night(SleepConfig.model_validate(data), project=project.project)
    rows = {row["name"]: row for row in _report(first)["skills"]}
    assert {name: rows[name]["status"] for name in SKILLS} == dict.fromkeys(SKILLS, "accepted")
    if auto_adopt is True:  # (under "all", the final checks' own samples may be enough)
        assert first.spend["calls_by_stage"].get("steady", 0) == 0, first.spend
