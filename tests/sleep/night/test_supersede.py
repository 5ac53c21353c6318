"""Newer evidence supersedes older: the gate's measurement of a line that newer and older
tasks pull apart marks the older tasks superseded (kept, never recalled again), and
``status`` and the report say so; an ``add``, a conflict among equally recent tasks or a trial
rejected for another reason supersedes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skillopt.types import (
    DeltaStatus,
    EditRecord,
    GateAction,
    GateDecision,
    TaskDelta,
    TaskRecord,
)
from skillopt_sleep.cli import main
from skillopt_sleep.config import load_sleep_config
from skillopt_sleep.night.learn.supersede import find_supersessions
from skillopt_sleep.night.learn.trials import Trial
from skillopt_sleep.night.report_markdown import render_markdown
from skillopt_sleep.state import project_dir
from skillopt_sleep.tasks.archive import TaskArchive, archive_path, open_archive
from skillopt_sleep.tasks.records import Supersession
from support.sleep_setup import MOCK_POOL

NOW = datetime(2026, 11, 27, 2, 30, tzinfo=UTC)
OLD = NOW - timedelta(days=12)
NEW = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)
OLD_LINE = "Write every date as ISO-8601 (2025-03-04)."
NEW_LINE = "Write every date as DD/MM/YYYY (04/03/2025)."


def _task(task_id: str) -> TaskRecord:
    return TaskRecord(id=task_id, intent=f"please do {task_id}", reference=f"rubric {task_id}")


@pytest.fixture
def archive(tmp_path: Path) -> Iterator[TaskArchive]:
    """Three old tasks mined on night 1 from old sessions, two new ones on night 3."""
    with open_archive(tmp_path / "tasks.sqlite", now=NOW) as opened:
        old = [_task(t) for t in ("old-a", "old-b", "old-c")]
        opened.record_mined(old, night=1, now=OLD, seen_at={t.id: OLD for t in old})
        new = [_task(t) for t in ("new-a", "new-b")]
        opened.record_mined(new, night=3, now=NOW, seen_at={"new-a": NEW, "new-b": NOW})
        yield opened


def _delta(task_id: str, status: DeltaStatus) -> TaskDelta:
    base, cand = {"improved": (0.5, 1.0), "regressed": (1.0, 0.5)}.get(status.value, (1.0, 1.0))
    return TaskDelta(task_id=task_id, baseline=base, candidate=cand, status=status)


def _trial(edits: list[EditRecord], deltas: dict[str, DeltaStatus], *, regression: bool = True,
           accepted: bool = False) -> Trial:  # fmt: skip
    decision = GateDecision(
        action=GateAction.ACCEPT if accepted else GateAction.REJECT, accepted=accepted,
        baseline=0.7, candidate=0.7, delta=0.0, blocked_by_regression=regression,
        task_deltas=tuple(_delta(t, s) for t, s in deltas.items()),
    )  # fmt: skip
    return Trial(name="union-1", kind="union", round=1, target="skill", edits=edits,
                 applied=edits, unmatched=[], decision=decision)  # fmt: skip


REPLACE = EditRecord(op="replace", anchor="iso-8601", content=NEW_LINE)
SWITCH = {
    "new-a": DeltaStatus.IMPROVED,
    "new-b": DeltaStatus.IMPROVED,
    "old-a": DeltaStatus.REGRESSED,
    "old-b": DeltaStatus.REGRESSED,
    "old-c": DeltaStatus.UNCHANGED,
}


def _marks(archive: TaskArchive) -> list[Supersession]:
    tasks = {t.id: t for t in archive.tasks()}
    return find_supersessions(
        [_trial([REPLACE], SWITCH)], tasks, night=3, now=NOW, learned=[OLD_LINE]
    )


def _find(archive: TaskArchive, trial: Trial) -> list[str]:
    marks = find_supersessions(
        [trial], {t.id: t for t in archive.tasks()}, night=3, now=NOW, learned=[OLD_LINE]
    )
    return sorted(m.task_id for m in marks)


def test_older_tasks_a_replace_regresses_while_newer_ones_improve_are_superseded(
    archive: TaskArchive,
) -> None:
    marks = find_supersessions(
        [_trial([REPLACE], SWITCH)], {t.id: t for t in archive.tasks()}, night=3, now=NOW,
        learned=["Keep answers short.", OLD_LINE],
    )  # fmt: skip
    assert sorted(m.task_id for m in marks) == ["old-a", "old-b"]
    mark = marks[0]
    assert mark.about == OLD_LINE and mark.since == NEW and mark.by_tasks == ("new-a", "new-b")
    assert "since 2026-11-21" in mark.why

    assert archive.mark_superseded(marks) == ["old-a", "old-b"]
    assert archive.mark_superseded(marks) == []  # idempotent: a resumed night marks once
    # kept (record, dates) but never recalled: they cannot gate an edit again
    assert {t.id for t in archive.tasks()} >= {"old-a", "old-b"}
    recalled = archive.recall(now=NOW, limit=10)
    assert sorted(t.id for t in recalled) == ["new-a", "new-b", "old-c"]
    stats = archive.stats()
    assert (stats.superseded, stats.active, stats.tasks) == (2, 3, 5)
    assert stats.supersessions == (
        "your sessions since 21 Nov contradict 2 archived task(s) about "
        f'"{OLD_LINE}": superseded (kept, never replayed; 2 newer task(s) pass only without '
        "that line)",
    )
    assert stats.to_dict()["supersessions"] == list(stats.supersessions)


def test_an_older_task_that_improves_too_is_no_evidence_either_way(archive: TaskArchive) -> None:
    trial = _trial([REPLACE], {**SWITCH, "old-c": DeltaStatus.IMPROVED})
    marks = find_supersessions([trial], {t.id: t for t in archive.tasks()}, night=3, now=NOW)
    assert sorted(m.task_id for m in marks) == ["old-a", "old-b"]
    assert marks[0].by_tasks == ("new-a", "new-b") and marks[0].since == NEW


def test_a_superseded_task_asked_again_after_the_evidence_is_current_again(
    archive: TaskArchive,
) -> None:
    archive.mark_superseded(_marks(archive))
    later = NOW + timedelta(days=1)
    archive.record_mined([_task("old-a")], night=4, now=later, seen_at={"old-a": later})
    archive.record_mined([_task("old-b")], night=4, now=later, seen_at={"old-b": OLD})
    assert archive.superseded_ids() == {"old-b"}


@pytest.mark.parametrize(
    ("case", "trial"),
    [
        ("an add never supersedes", _trial([EditRecord(op="add", content=NEW_LINE)], SWITCH)),
        ("rejected for no gain", _trial([REPLACE], SWITCH, regression=False)),
        ("accepted", _trial([REPLACE], SWITCH, accepted=True)),
        ("nothing improved", _trial([REPLACE], {"old-a": DeltaStatus.REGRESSED})),
        (
            "a regressed task as recent as the evidence",
            _trial([REPLACE], {**SWITCH, "new-b": DeltaStatus.REGRESSED}),
        ),
        (
            "older tasks only improve",
            _trial([REPLACE], {"old-a": DeltaStatus.IMPROVED, "old-b": DeltaStatus.REGRESSED}),
        ),
    ],
)
def test_nothing_is_superseded_without_newer_evidence_against_a_changed_line(
    archive: TaskArchive, case: str, trial: Trial
) -> None:
    assert _find(archive, trial) == [], case


def test_status_and_the_report_say_what_was_superseded_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    config = tmp_path / "sleep.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n{MOCK_POOL}', encoding="utf-8")
    cfg = load_sleep_config(config)
    with open_archive(archive_path(project_dir(cfg.state_path(), project)), now=NOW) as db:
        old = [_task(t) for t in ("old-a", "old-b", "old-c")]
        db.record_mined(old, night=1, now=OLD, seen_at={t.id: OLD for t in old})
        new = [_task(t) for t in ("new-a", "new-b")]
        db.record_mined(new, night=3, now=NOW, seen_at={"new-a": NEW, "new-b": NOW})
        marks = _marks(db)
        db.mark_superseded(marks)
        stats = db.stats().to_dict()
    line = (
        f'your sessions since 21 Nov contradict 2 archived task(s) about "{OLD_LINE}": superseded'
    )
    assert main(["status", "--config", str(config), "--project", str(project)]) == 0
    text = capsys.readouterr().out
    assert "task archive: 5 task(s): 3 active" in text and line in text

    md = render_markdown({
        "night": 3, "project_name": "p", "status": "complete", "chart": [], "archive": stats,
        "archive_changes": {"superseded": [m.to_dict() for m in marks]},
    })  # fmt: skip
    assert "superseded tonight: 2 (newer sessions contradict them" in md
    assert "old-a: last asked 2026-11-15; 2 task(s) from sessions since 2026-11-21" in md
    assert line in md
