"""Nights compound: tasks live on in the archive, later nights learn from them with no new
session, untested edits come back, and a night with nothing left to learn is cheap."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skillopt.backends.mock import World
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.entry import NightOutcome, NightResult, run_night
from skillopt_sleep.state import project_dir
from skillopt_sleep.tasks.archive import archive_path, open_archive

WORLD = World()
GOOD = {r.text for r in WORLD.rules if not r.harmful}
HARMFUL = next(r.text for r in WORLD.rules if r.harmful)


def _config(demo: DemoSetup, **night: Any) -> SleepConfig:
    data = demo.config.model_dump(mode="json")
    data["night"].update(night)
    data["auto_adopt"] = True  # what a user running `once && adopt` every night gets
    return SleepConfig.model_validate(data)


def _report(outcome: NightOutcome) -> dict[str, Any]:
    assert outcome.run_dir is not None
    return json.loads((outcome.run_dir / "report.json").read_text())


def _live(demo: DemoSetup) -> str:
    cfg = demo.config
    return (
        cfg.live_skill_path(demo.project).read_text()
        + cfg.live_memory_path(demo.project).read_text()
    )


@pytest.mark.slow
async def test_later_nights_learn_from_the_archive_without_new_sessions(tmp_path: Path) -> None:
    demo = prepare_demo(tmp_path)
    # the first night may only change the skill: the memory's rule is left to learn
    first = await run_night(_config(demo, evolve_memory=False), project=demo.project)
    assert first.accepted and first.n_sessions > 0
    learned_first = {t for t in GOOD if t in _live(demo)}
    assert learned_first and learned_first != GOOD

    cfg = _config(demo)
    second = await run_night(cfg, project=demo.project)
    report = _report(second)
    assert second.n_sessions == 0  # every session was harvested by the first night
    assert report["tasks"]["recalled"] == report["tasks"]["total"] > 0
    assert second.accepted, report["no_edit_reasons"]
    learned_second = {t for t in GOOD if t in _live(demo)}
    assert learned_first < learned_second
    assert HARMFUL not in _live(demo)

    for _ in range(4):
        last = await run_night(cfg, project=demo.project)
        if last.result is NightResult.NO_EDITS:
            break
    assert HARMFUL not in _live(demo)
    # nothing left to learn: the recalled tasks are replayed once, and that is all
    report = _report(last)
    assert last.result is NightResult.NO_EDITS
    assert any("already passes" in r for r in report["no_edit_reasons"])
    assert set(report["spend"]["calls_by_stage"]) <= {"rollout", "judge"}
    chart = report["chart"]
    assert [p["night"] for p in chart] == list(range(1, len(chart) + 1))
    adopted_scores = [p["baseline"] for p in chart]
    assert adopted_scores[-1] == 1.0 and adopted_scores[0] < adopted_scores[-1]


@pytest.mark.slow
async def test_outcomes_and_provenance_are_kept_per_task(tmp_path: Path) -> None:
    demo = prepare_demo(tmp_path)
    cfg = _config(demo)
    await run_night(cfg, project=demo.project)
    await run_night(cfg, project=demo.project)
    path = archive_path(project_dir(cfg.state_path(), demo.project))
    with open_archive(path) as archive:
        tasks = archive.tasks()
        assert tasks and all(t.sessions for t in tasks)
        history = archive.outcome_history(tasks[0].id)
        assert [h["night"] for h in history] == [1, 2]
        assert len({h["docs_hash"] for h in history}) == 2  # the adopted documents changed


async def test_an_untested_edit_is_carried_and_tried_again(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from skillopt.types import TaskRecord
    from skillopt_sleep.mining.tasks_file import write_tasks_file

    demo = prepare_demo(tmp_path)
    path = demo.root / "tasks.json"
    intents = [
        "Where is the retry delay computed?",
        "Where do we parse the config file?",
        "Fix the failing date parser test",
        "Fix the bug in the cache eviction",
        "Add a feature flag for the dark theme",
    ]
    tasks = [TaskRecord(id=f"t{i}", intent=x) for i, x in enumerate(intents)]
    write_tasks_file(path, tasks, generated_at=datetime.now(UTC))
    cfg = _config(demo, evolve_skill=False)
    first = await run_night(cfg, project=demo.project, tasks_file=path)
    carried = [c["edit"]["content"] for c in _report(first)["untested_edits"]]
    assert carried
    # a later night brings a task the carried edit's reflection never saw
    more = [*tasks, TaskRecord(id="t9", intent="Rename the --quiet option to --silent")]
    write_tasks_file(path, more, generated_at=datetime.now(UTC))
    second = await run_night(cfg, project=demo.project, tasks_file=path)
    report = _report(second)
    # (alone, or merged with the same edit proposed again tonight: one trial either way)
    tried = [
        t for t in report["trials"] if t["kind"] == "single" and t["edits"][0]["content"] in carried
    ]
    assert tried, report["trials"]
    assert all(t["decision"] for t in tried), [(t["note"], t["edits"], t["target"]) for t in tried]
    assert all("t9" in t["decision"]["arithmetic"]["validated_on"] for t in tried)
    assert all(not set(t["seen"]) & set(t["decision"]["arithmetic"]["validated_on"]) for t in tried)
