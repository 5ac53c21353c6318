"""The archive's sample answers: kept by question, read back as a per-task noise estimate,
and an archive of the older schema brought up to date in place (its records kept)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skillopt.types import TaskRecord
from skillopt_sleep.tasks.archive import TaskArchive, open_archive
from skillopt_sleep.tasks.archive_answers import KEEP_DAYS, KEEP_PER_QUESTION
from skillopt_sleep.tasks.archive_db import SCHEMA_VERSION
from skillopt_sleep.tasks.records import ArchivePolicy, NoiseEstimate, Question, SampleAnswer

NOW = datetime(2026, 11, 27, 2, 30, tzinfo=UTC)


def _q(task_id: str, docs: str = "d1", key: str = "k1") -> Question:
    return Question(task_id=task_id, task_hash=f"h-{task_id}", docs_hash=docs, answer_key=key)


def _answers(q: Question, *scores: float, first: int = 0) -> list[SampleAnswer]:
    return [SampleAnswer(question=q, sample_id=first + i, score=s) for i, s in enumerate(scores)]


@pytest.fixture
def archive(tmp_path: Path) -> Iterator[TaskArchive]:
    with open_archive(tmp_path / "tasks.sqlite", now=NOW) as opened:
        opened.record_mined(
            [TaskRecord(id=t, intent=f"do {t}") for t in ("steady", "noisy", "failing")],
            night=1,
            now=NOW,
        )
        yield opened


def test_noise_is_per_question_and_counts_every_night(archive: TaskArchive) -> None:
    written = archive.record_answers(
        [*_answers(_q("steady"), 1.0, 1.0), *_answers(_q("noisy"), 1.0, 1.0, 1.0),
         *_answers(_q("failing"), 0.0, 0.0), *_answers(_q("unknown"), 1.0)],
        night=1, run_id="r1", now=NOW,
    )  # fmt: skip
    assert written == 7  # a task the archive does not hold is skipped
    # a later night's sample of the same question (same sample id, another run) adds up
    archive.record_answers(_answers(_q("noisy"), 0.0), night=2, run_id="r2", now=NOW)
    # a resumed night recording again keeps each sample once
    again = archive.record_answers(_answers(_q("noisy"), 0.0), night=2, run_id="r2", now=NOW)
    assert again == 0

    steady = archive.task_noise("steady", "d1", "k1", task_hash="h-steady")
    assert steady == NoiseEstimate(
        samples=2, passes=2, low=1.0, high=1.0, disagreement=0.0, last_night=1
    )
    assert steady.steady and steady.steady_pass(2) and not steady.steady_pass(3)
    noisy = archive.task_noise("noisy", "d1", "k1", task_hash="h-noisy")
    assert (noisy.samples, noisy.passes, noisy.last_night) == (4, 3, 2)
    assert noisy.disagreement == pytest.approx(0.5)  # 6 of 12 ordered pairs differ
    assert not noisy.steady and not noisy.steady_pass(1) and not noisy.steady_fail(1)
    failing = archive.task_noise("failing", "d1", "k1", task_hash="h-failing")
    assert failing.steady_fail(2) and not failing.steady_pass(1)

    # another document, model or wording of the task is another question: nothing known
    for other in (
        archive.task_noise("steady", "d2", "k1", task_hash="h-steady"),
        archive.task_noise("steady", "d1", "k2", task_hash="h-steady"),
        archive.task_noise("steady", "d1", "k1", task_hash="reworded"),
    ):
        assert other == NoiseEstimate() and not other.steady
    assert archive.noise([_q("steady"), _q("steady", docs="d2")]) == {_q("steady"): steady}


def test_saving_answers_prunes_old_ones_and_each_questions_oldest(archive: TaskArchive) -> None:
    old = NOW - timedelta(days=KEEP_DAYS + 1)
    archive.record_answers(_answers(_q("failing"), 0.0, 0.0), night=1, run_id="r1", now=old)
    assert archive.task_noise("failing", "d1", "k1", task_hash="h-failing").samples == 2
    # a question sampled on many nights keeps its newest samples, and a disagreement
    archive.record_answers(_answers(_q("noisy"), 0.0), night=2, run_id="r2", now=NOW)
    for night in range(3, 3 + KEEP_PER_QUESTION + 4):
        archive.record_answers(_answers(_q("steady"), 1.0), night=night, run_id=f"r{night}",
                               now=NOW)  # fmt: skip
        archive.record_answers(_answers(_q("noisy"), 1.0), night=night, run_id=f"r{night}",
                               now=NOW)  # fmt: skip
    steady = archive.task_noise("steady", "d1", "k1", task_hash="h-steady")
    assert (steady.samples, steady.last_night) == (KEEP_PER_QUESTION, 6 + KEEP_PER_QUESTION)
    assert steady.steady_pass(2)
    noisy = archive.task_noise("noisy", "d1", "k1", task_hash="h-noisy")
    assert (noisy.samples, noisy.low) == (KEEP_PER_QUESTION + 1, 0.0)
    assert not noisy.steady  # the old failure still counts
    # answers older than KEEP_DAYS went when newer ones were saved
    assert archive.task_noise("failing", "d1", "k1", task_hash="h-failing") == NoiseEstimate()
    conn = sqlite3.connect(archive.path)
    kept = conn.execute("SELECT count(*) FROM sample_answers").fetchone()
    conn.close()
    assert kept == (2 * KEEP_PER_QUESTION + 1,)


@pytest.mark.parametrize("old", [1, 2, 3, 4])
def test_an_archive_of_an_older_schema_is_brought_up_to_date_and_keeps_its_records(
    tmp_path: Path, old: int
) -> None:
    path = tmp_path / "tasks.sqlite"
    with open_archive(path, now=NOW) as archive:
        archive.record_mined([TaskRecord(id="t1", intent="do t1")], night=1, now=NOW)
    conn = sqlite3.connect(path)  # what the older schema's code left behind
    conn.execute("DROP TABLE request_keys")
    if old < 4:
        conn.execute("DROP TABLE superseded")
    if old < 3:
        conn.execute("ALTER TABLE outcomes DROP COLUMN answer_key")
    if old < 2:
        conn.execute("DROP TABLE sample_answers")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(old),))
    conn.execute(
        "INSERT INTO outcomes (task_id, night, run_id, docs_hash, score, samples, passed,"
        " recorded_at) VALUES ('t1', 1, 'r1', 'd1', 1.0, 2, 1, ?)",
        (NOW.isoformat(),),
    )
    conn.commit()
    conn.close()

    with open_archive(path, now=NOW) as archive:
        assert [t.id for t in archive.tasks()] == ["t1"]
        assert archive.outcome_history("t1") == [
            {"night": 1, "run_id": "r1", "docs_hash": "d1", "answer_key": "", "score": 1.0,
             "samples": 2, "passed": True}
        ]  # fmt: skip
        assert archive.task("t1").pass_streak == 1  # type: ignore[union-attr]
        archive.record_answers(_answers(_q("t1"), 1.0), night=2, run_id="r2", now=NOW)
        assert archive.task_noise("t1", "d1", "k1", task_hash="h-t1").samples == 1
        assert archive.superseded() == []  # the tables the newer steps add are there
        assert archive.request_key_owners(["t1"]) == {}
    conn = sqlite3.connect(path)
    version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    conn.close()
    assert version == (str(SCHEMA_VERSION),) and SCHEMA_VERSION == 5


def test_a_pass_streak_is_under_the_current_models_and_solved_tasks_revive_on_a_change(
    archive: TaskArchive,
) -> None:
    def passes(night: int, key: str) -> None:
        archive.record_outcomes(night=night, run_id=f"r{night}", docs_hash="d", now=NOW,
                                scores={"steady": 1.0}, passed={"steady": True},
                                answer_key=key)  # fmt: skip

    def streak() -> int:
        return archive.task("steady").pass_streak  # type: ignore[union-attr]

    passes(1, "k1")
    passes(2, "k1")
    assert streak() == 2  # no models known yet: every pass counts (as before keys)
    assert archive.revive_solved("k1") == []  # the first key known: nothing to compare
    retired = archive.retire(now=NOW, policy=ArchivePolicy(retire_after_passes=2))
    assert [t for t, _ in retired] == ["steady"]
    assert archive.revive_solved("k1") == []  # the same models: it stays retired
    assert archive.revive_solved("k2") == ["steady"]
    assert not archive.task("steady").retired  # type: ignore[union-attr]
    assert streak() == 0  # its passes were under other models
    passes(3, "k2")
    assert streak() == 1
    assert archive.retire(now=NOW, policy=ArchivePolicy(retire_after_passes=2)) == []
