"""The archive's sample answers: every judged sample kept by the question it answered.

A question is what determines a verdict (:class:`Question`: the task as the target and the
judge see it, the documents' hashes, the models and settings); each sample of it is kept
with its sample id and run, so answers drawn on different nights add up. From them the
archive estimates, per question, how noisy the task is (:meth:`AnswersSide.noise`): a
later night needs no new rollout for a task whose recorded answers all agree.

What is kept is bounded (:meth:`AnswersSide.record_answers` prunes as it saves): an answer
older than :data:`KEEP_DAYS` no longer counts (the provider may have changed the model since;
the task is then measured again), and a question keeps its :data:`KEEP_PER_QUESTION` newest
samples, plus the newest one that disagreed with them if any did, so pruning never makes a
noisy task look steady.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime, timedelta

from skillopt_sleep.tasks.archive_base import ArchiveBase, iso
from skillopt_sleep.tasks.records import NoiseEstimate, Question, SampleAnswer, TriedDocuments

__all__ = ["KEEP_DAYS", "KEEP_PER_QUESTION", "AnswersSide"]

KEEP_DAYS = 90.0
"""Answers recorded longer ago than this are dropped when answers are saved."""
KEEP_PER_QUESTION = 32
"""The newest samples a question keeps (plus one that disagreed with them, if any did)."""


class AnswersSide(ArchiveBase):
    """Record sample answers and read back how they agree (one transaction each)."""

    def record_answers(
        self, answers: Iterable[SampleAnswer], *, night: int, run_id: str, now: datetime
    ) -> int:
        """Keep ``answers`` (those of tasks in the archive); a sample already kept for this
        run is kept once (a resumed night records again). What is kept is then pruned (see
        the module docstring). Returns how many were new."""
        written = 0
        with self.transaction():
            known = {str(r["id"]) for r in self._rows("SELECT id FROM tasks")}
            for answer in answers:
                q = answer.question
                if q.task_id not in known:
                    continue
                cursor = self._conn.execute(
                    "INSERT OR IGNORE INTO sample_answers (task_id, task_hash, docs_hash,"
                    " answer_key, sample_id, run_id, night, score, recorded_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (q.task_id, q.task_hash, q.docs_hash, q.answer_key, answer.sample_id,
                     run_id, night, float(answer.score), iso(now)),
                )  # fmt: skip
                written += cursor.rowcount
            self._prune_answers(now)
        return written

    def _prune_answers(self, now: datetime) -> int:
        """Drop answers older than :data:`KEEP_DAYS`, and each question's samples beyond its
        :data:`KEEP_PER_QUESTION` newest (a disagreeing one kept). Returns how many went."""
        cutoff = iso(now - timedelta(days=KEEP_DAYS))
        gone = self._conn.execute(
            "DELETE FROM sample_answers WHERE recorded_at < ?", (cutoff,)
        ).rowcount
        crowded = self._rows(
            "SELECT task_id, task_hash, docs_hash, answer_key FROM sample_answers"
            " GROUP BY task_id, task_hash, docs_hash, answer_key HAVING count(*) > ?",
            (KEEP_PER_QUESTION,),
        )
        for q in crowded:
            rows = self._rows(
                "SELECT rowid, score FROM sample_answers WHERE task_id = ? AND task_hash = ?"
                " AND docs_hash = ? AND answer_key = ?"
                " ORDER BY night DESC, recorded_at DESC, run_id DESC, sample_id DESC",
                (q["task_id"], q["task_hash"], q["docs_hash"], q["answer_key"]),
            )
            kept, rest = rows[:KEEP_PER_QUESTION], rows[KEEP_PER_QUESTION:]
            scores = {float(r["score"]) for r in kept}
            if len(scores) == 1:  # they agree: an older disagreement must still count
                odd = next((r for r in rest if float(r["score"]) not in scores), None)
                rest = [r for r in rest if r is not odd]
            self._conn.executemany(
                "DELETE FROM sample_answers WHERE rowid = ?", [(r["rowid"],) for r in rest]
            )
            gone += len(rest)
        return gone

    def task_noise(
        self, task_id: str, docs_hash: str, model: str, *, task_hash: str
    ) -> NoiseEstimate:
        """How the recorded samples of one task agree under ``docs_hash`` and the models and
        settings ``model`` (an answer key); no sample gives ``NoiseEstimate()``."""
        question = Question(
            task_id=task_id, task_hash=task_hash, docs_hash=docs_hash, answer_key=model
        )
        return self.noise([question]).get(question, NoiseEstimate())

    def sample_scores(self, question: Question) -> dict[int, float]:
        """The recorded score of each sample id of ``question`` (the newest when a sample
        id was recorded by more than one run)."""
        rows = self._rows(
            "SELECT sample_id, score FROM sample_answers WHERE task_id = ? AND task_hash = ?"
            " AND docs_hash = ? AND answer_key = ? ORDER BY night, recorded_at",
            (question.task_id, question.task_hash, question.docs_hash, question.answer_key),
        )
        return {int(r["sample_id"]): float(r["score"]) for r in rows}

    def tried(self, question: Question) -> TriedDocuments:
        """How ``question``'s task fared under every document any night sampled it under
        (the same task hash and answer key; ``question.docs_hash`` is not read)."""
        rows = self._rows(
            "SELECT count(DISTINCT docs_hash) AS docs, count(*) AS n, sum(score >= 1.0) AS passes"
            " FROM sample_answers WHERE task_id = ? AND task_hash = ? AND answer_key = ?",
            (question.task_id, question.task_hash, question.answer_key),
        )
        row = rows[0] if rows else None
        if row is None or not row["n"]:
            return TriedDocuments()
        return TriedDocuments(documents=int(row["docs"]), samples=int(row["n"]),
                              passes=int(row["passes"] or 0))  # fmt: skip

    def noise(self, questions: Collection[Question]) -> dict[Question, NoiseEstimate]:
        """:meth:`task_noise` for many questions at once (those with no sample are left out)."""
        out: dict[Question, NoiseEstimate] = {}
        for q in questions:
            rows = self._rows(
                "SELECT count(*) AS n, sum(score >= 1.0) AS passes, min(score) AS low,"
                " max(score) AS high, max(night) AS newest FROM sample_answers"
                " WHERE task_id = ? AND task_hash = ?"
                " AND docs_hash = ? AND answer_key = ?",
                (q.task_id, q.task_hash, q.docs_hash, q.answer_key),
            )
            n = int(rows[0]["n"]) if rows else 0
            if not n:
                continue
            counts = self._rows(
                "SELECT count(*) AS k FROM sample_answers WHERE task_id = ? AND task_hash = ?"
                " AND docs_hash = ? AND answer_key = ? GROUP BY score",
                (q.task_id, q.task_hash, q.docs_hash, q.answer_key),
            )
            same = sum(int(r["k"]) * (int(r["k"]) - 1) for r in counts)
            pairs = n * (n - 1)
            out[q] = NoiseEstimate(
                samples=n,
                passes=int(rows[0]["passes"] or 0),
                low=float(rows[0]["low"]),
                high=float(rows[0]["high"]),
                disagreement=(pairs - same) / pairs if pairs else 0.0,
                last_night=int(rows[0]["newest"]),
            )
        return out
