"""The archive's sample answers: every judged sample kept by the question it answered.

A question is what determines a verdict (:class:`Question`: the task as the target and the
judge see it, the documents' hashes, the models and settings); each sample of it is kept
with its sample id and run, so answers drawn on different nights add up. From them the
archive estimates, per question, how noisy the task is (:meth:`AnswersSide.noise`): a
later night needs no new rollout for a task whose recorded answers all agree.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime

from skillopt_sleep.tasks.archive_base import ArchiveBase, iso
from skillopt_sleep.tasks.records import NoiseEstimate, Question, SampleAnswer

__all__ = ["AnswersSide"]


class AnswersSide(ArchiveBase):
    """Record sample answers and read back how they agree (one transaction each)."""

    def record_answers(
        self, answers: Iterable[SampleAnswer], *, night: int, run_id: str, now: datetime
    ) -> int:
        """Keep ``answers`` (those of tasks in the archive); a sample already kept for this
        run is kept once (a resumed night records again). Returns how many were new."""
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
        return written

    def task_noise(
        self, task_id: str, docs_hash: str, model: str, *, task_hash: str
    ) -> NoiseEstimate:
        """How the recorded samples of one task agree under ``docs_hash`` and the models and
        settings ``model`` (an answer key); no sample gives ``NoiseEstimate()``."""
        question = Question(
            task_id=task_id, task_hash=task_hash, docs_hash=docs_hash, answer_key=model
        )
        return self.noise([question]).get(question, NoiseEstimate())

    def noise(self, questions: Collection[Question]) -> dict[Question, NoiseEstimate]:
        """:meth:`task_noise` for many questions at once (those with no sample are left out)."""
        out: dict[Question, NoiseEstimate] = {}
        for q in questions:
            rows = self._rows(
                "SELECT count(*) AS n, sum(score >= 1.0) AS passes, min(score) AS low,"
                " max(score) AS high FROM sample_answers WHERE task_id = ? AND task_hash = ?"
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
            )
        return out
