"""Quiet nights are nearly free: a night whose tasks all pass steadily under the live
documents and models (by the archive's recorded answers) ends after harvest with at most
the drift check's few calls (none with it off), and anything that makes it another
question (the models, the documents, a sample that disagreed) has it measure again. The
night that stages documents samples them enough that the night after their adoption is
already quiet."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.entry import NightOutcome, NightResult, run_night
from skillopt_sleep.night.outcome import read_live
from skillopt_sleep.replay import Docs
from skillopt_sleep.rundir import RunStatus
from skillopt_sleep.state import project_dir
from skillopt_sleep.tasks.archive import archive_path, open_archive
from skillopt_sleep.tasks.records import Question, SampleAnswer

QUIET = "quiet night: no new session; every one of the"
NO_DRIFT = {"drift_check_calls": 0}


def _config(demo: DemoSetup, **changes: Any) -> SleepConfig:
    data = demo.config.model_dump(mode="json")
    data["auto_adopt"] = True  # what a user running `once && adopt` every night gets
    data["night"].update(NO_DRIFT)  # the drift check's own tests turn it on
    for section, values in changes.items():
        data[section].update(values)
    return SleepConfig.model_validate(data)


def _report(outcome: NightOutcome) -> dict[str, Any]:
    assert outcome.run_dir is not None
    report: dict[str, Any] = json.loads((outcome.run_dir / "report.json").read_text())
    return report


def _calls(outcome: NightOutcome) -> int:
    return int(outcome.spend["calls"])


def _live_docs(cfg: SleepConfig, demo: DemoSetup) -> Docs:
    return Docs(skill=read_live(cfg.live_skill_path(demo.project))[0],
                memory=read_live(cfg.live_memory_path(demo.project))[0])  # fmt: skip


def _rollouts(outcome: NightOutcome) -> list[dict[str, Any]]:
    assert outcome.run_dir is not None
    text = (outcome.run_dir / "rollouts.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


async def _until_quiet(demo: DemoSetup, cfg: SleepConfig) -> NightOutcome:
    """A learning night (which samples the documents it stages enough for them to be
    steady), then the night after the adoption: the first quiet one."""
    first = await run_night(cfg, project=demo.project)
    assert first.accepted and first.n_sessions > 0
    return await run_night(cfg, project=demo.project)


async def test_a_quiet_night_spends_nothing_and_says_so_in_one_line(tmp_path: Path) -> None:
    demo = prepare_demo(tmp_path)
    quiet = await _until_quiet(demo, _config(demo))
    assert quiet.status is RunStatus.COMPLETE and quiet.exit_code == 0
    assert quiet.result is NightResult.NO_EDITS and quiet.n_tasks > 0
    assert _calls(quiet) == 0, quiet.spend
    assert quiet.reason.startswith(QUIET) and "\n" not in quiet.reason
    assert quiet.reason.endswith("no model call")
    report = _report(quiet)
    assert report["reason"] == quiet.reason
    assert quiet.reason in report["no_edit_reasons"]
    assert report["baseline"] == 1.0  # the chart goes on from the recorded answers
    assert report.get("estimate") is None  # nothing to estimate: no call
    md = (quiet.run_dir / "report.md").read_text()  # type: ignore[operator]
    assert quiet.reason in md


async def test_the_staged_documents_are_sampled_after_the_decision_on_new_samples(
    tmp_path: Path,
) -> None:
    demo = prepare_demo(tmp_path)
    cfg = _config(demo)
    first = await run_night(cfg, project=demo.project)
    assert first.accepted
    journal = json.loads((first.run_dir / "run.json").read_text())  # type: ignore[operator]
    stages = [stage["name"] for stage in journal["stages"]]
    rows = [r for r in _rollouts(first) if r["fresh"]]
    final = [r for r in rows if r["phase"] == "final"]
    staged = {f"{r['skill_hash']}.{r['memory_hash']}" for r in final}
    staged -= {f"{r['skill_hash']}.{r['memory_hash']}" for r in rows if r["phase"] == "rollout"}
    assert len(staged) == 1
    topped = [r for r in rows if r["phase"] == "steady"]
    if topped:  # (the final check's own samples of the staged documents may be enough)
        assert stages.index("steady") > stages.index("final")  # no gate decision reads them
        assert {f"{r['skill_hash']}.{r['memory_hash']}" for r in topped} == staged
    drawn = Counter(
        (r["task_id"], r["sample_id"]) for r in rows
        if f"{r['skill_hash']}.{r['memory_hash']}" in staged
    )  # fmt: skip
    assert max(drawn.values()) == 1  # each a sample of its own, never one read back
    per_task = Counter(task for task, _ in drawn)
    need = max(cfg.night.dream_rollouts, cfg.gate.samples_per_task)  # what makes one steady
    assert min(per_task.values()) >= need, per_task
    if topped:
        assert {per_task[r["task_id"]] for r in topped} == {need}  # just the missing ones
        # the judge had seen those answers tonight: its verdicts came from the response cache
        assert first.spend["calls_by_stage"]["steady"] <= len(topped)
    path = archive_path(project_dir(cfg.state_path(), demo.project))
    conn = sqlite3.connect(path)
    kept = conn.execute(
        "SELECT count(*) FROM sample_answers WHERE docs_hash = ?", (staged.pop(),)
    ).fetchone()
    conn.close()
    assert kept == (sum(per_task.values()),)


async def test_a_model_or_setting_change_measures_again(tmp_path: Path) -> None:
    demo = prepare_demo(tmp_path)
    cfg = _config(demo)
    assert _calls(await _until_quiet(demo, cfg)) == 0
    pool = cfg.pool.model_dump(mode="json")  # type: ignore[union-attr]
    pool["members"][0]["model"] = "mock-next"
    changed = await run_night(_config(demo, pool=pool), project=demo.project)
    assert changed.spend["calls_by_stage"].get("rollout", 0) >= changed.n_tasks, changed.spend
    assert not changed.reason.startswith("quiet night")
    scored = await run_night(_config(demo, gate={"metric": "hard"}), project=demo.project)
    assert scored.spend["calls_by_stage"].get("rollout", 0) >= scored.n_tasks, scored.spend


async def test_a_changed_document_measures_again(tmp_path: Path) -> None:
    demo = prepare_demo(tmp_path)
    cfg = _config(demo)
    assert _calls(await _until_quiet(demo, cfg)) == 0
    memory = cfg.live_memory_path(demo.project)
    memory.write_text(memory.read_text() + "\n- A line the user added today.\n")
    edited = await run_night(cfg, project=demo.project)
    assert edited.spend["calls_by_stage"].get("rollout", 0) >= edited.n_tasks, edited.spend
    assert not edited.reason.startswith("quiet night")


async def test_a_task_whose_samples_disagreed_is_sampled_again(tmp_path: Path) -> None:
    demo = prepare_demo(tmp_path)
    cfg = _config(demo)
    assert _calls(await _until_quiet(demo, cfg)) == 0
    path = archive_path(project_dir(cfg.state_path(), demo.project))
    conn = sqlite3.connect(path)  # one question tonight asks again, as recorded
    row = conn.execute(
        "SELECT task_id, task_hash, docs_hash, answer_key FROM sample_answers"
        " WHERE docs_hash = ? LIMIT 1",
        (_live_docs(cfg, demo).key,),
    ).fetchone()
    conn.close()
    question = Question(task_id=row[0], task_hash=row[1], docs_hash=row[2], answer_key=row[3])
    with open_archive(path) as archive:
        assert archive.noise([question])[question].steady
        # one sample of it, drawn on some night, failed: the task is noisy, not steady
        archive.record_answers(
            [SampleAnswer(question=question, sample_id=7, score=0.0)],
            night=99,
            run_id="a-noisy-draw",
            now=datetime.now(UTC),
        )
        assert not archive.noise([question])[question].steady
    noisy = await run_night(cfg, project=demo.project)
    assert not noisy.reason.startswith("quiet night")
    rollouts = [
        json.loads(line)
        for line in (noisy.run_dir / "rollouts.jsonl").read_text().splitlines()  # type: ignore[operator]
    ]
    assert any(r["task_id"] == question.task_id for r in rollouts)
    assert noisy.spend["calls_by_stage"].get("rollout", 0) >= noisy.n_tasks


async def test_tasks_retired_as_solved_come_back_under_other_models(tmp_path: Path) -> None:
    demo = prepare_demo(tmp_path)
    cfg = _config(demo)
    assert _calls(await _until_quiet(demo, cfg)) == 0
    for _ in range(3):  # quiet nights count as passes: the solved tasks retire
        last = await run_night(cfg, project=demo.project)
        if last.result is NightResult.NO_TASKS:
            break
    assert last.result is NightResult.NO_TASKS and _calls(last) == 0
    pool = cfg.pool.model_dump(mode="json")  # type: ignore[union-attr]
    pool["members"][0]["model"] = "mock-next"
    changed = await run_night(_config(demo, pool=pool), project=demo.project)
    assert changed.n_tasks > 0
    assert changed.spend["calls_by_stage"].get("rollout", 0) >= changed.n_tasks, changed.spend
    notes = _report(changed)["notes"]
    assert any("retired as solved come back" in n for n in notes), notes
