"""Quiet nights: answers the archive already holds stand in for rollouts that would only
draw them again.

1. **Keep** (:func:`keep_samples`): after each complete night, every judged fresh sample
   it drew (rollouts, trials, the final check, the test split; the live and the candidate
   documents alike) goes into the archive by the question it answered
   (:mod:`.questions`): a candidate adopted tonight is tomorrow's live documents, and its
   samples are then answers to tomorrow's question.
2. **Ask** (:func:`noise_estimates`): per task, how the recorded samples of tonight's
   question agree. A task is never steady on a disagreement: one differing sample under
   the same question, on any night, makes it noisy until the documents or models change.
3. **End quiet** (:func:`quiet_decision`): when every task tonight is steady and passing,
   with at least the samples the rollouts stage would draw (``max(night.dream_rollouts,
   gate.samples_per_task)``), the rollouts could only find that every task already passes,
   and the night would stop there with nothing to learn. It stops before them instead,
   with the same decision, built from the records, and no model call.

Only the live documents' question is answered from records. A candidate is new documents,
so a new question: the gate always measures it, and its held-out validation never reads a
recorded answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skillopt.types import GateAction, RolloutResult, TaskRecord
from skillopt_sleep.night.decision import Decision
from skillopt_sleep.night.gate_modes import OFF
from skillopt_sleep.night.questions import answer_key, task_hash
from skillopt_sleep.night.running import Night
from skillopt_sleep.replay import Docs, Job
from skillopt_sleep.tasks.archive import TaskArchive
from skillopt_sleep.tasks.records import NoiseEstimate, Question, SampleAnswer

__all__ = ["Quiet", "keep_samples", "noise_estimates", "quiet_decision", "steady_samples"]


def steady_samples(night: Night) -> int:
    """How many agreeing samples make a task steady: what the rollouts stage would draw."""
    return max(night.cfg.night.dream_rollouts, night.cfg.gate.samples_per_task)


def _question(task: TaskRecord, docs_hash: str, key: str) -> Question:
    return Question(task_id=task.id, task_hash=task_hash(task), docs_hash=docs_hash,
                    answer_key=key)  # fmt: skip


def noise_estimates(
    night: Night, tasks: Sequence[TaskRecord], docs: Docs
) -> dict[str, NoiseEstimate]:
    """Per task id, how its recorded samples under ``docs`` and tonight's models agree
    (``NoiseEstimate()`` where none is recorded, or the models or the archive cannot be
    known). For the gate: a task steady under the documents it measures needs fewer
    samples; one that ever disagreed is noisy."""
    key = answer_key(night.cfg)
    if not key or night.archive is None:
        return {t.id: NoiseEstimate() for t in tasks}
    questions = {t.id: _question(t, docs.key, key) for t in tasks}
    found = night.archive.noise(list(questions.values()))
    return {tid: found.get(q, NoiseEstimate()) for tid, q in questions.items()}


def keep_samples(
    night: Night,
    archive: TaskArchive,
    tasks: Iterable[TaskRecord],
    rows: Iterable[Mapping[str, Any]],
    *,
    night_no: int,
) -> int:
    """Tonight's judged fresh samples (rows of ``rollouts.jsonl``) into the archive."""
    key = answer_key(night.cfg)
    if not key:
        return 0
    by_id = {t.id: t for t in tasks}
    answers = []
    for row in rows:
        task = by_id.get(str(row.get("task_id", "")))
        if task is None or not row.get("fresh") or row.get("error"):
            continue
        result = RolloutResult.from_dict(
            {k: v for k, v in row.items() if k in RolloutResult.__dataclass_fields__}
        )
        score = night.score(result)
        if not math.isfinite(score):
            continue
        docs_hash = f"{result.skill_hash}.{result.memory_hash}"
        answers.append(SampleAnswer(question=_question(task, docs_hash, key),
                                    sample_id=result.sample_id, score=score))  # fmt: skip
    return archive.record_answers(answers, night=night_no, run_id=night.run.run_id,
                                  now=night.clock())  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Quiet:
    """A quiet night: the decision from the records, and the one line that says so."""

    decision: Decision
    line: str


async def quiet_decision(
    night: Night,
    tasks: Sequence[TaskRecord],
    start: Docs,
    *,
    new_sessions: int,
) -> Quiet | None:
    """The night's decision when every task in ``tasks`` is steady and passing under
    ``start`` (see the module docstring), else ``None``.

    A task whose recorded samples all pass but are fewer than the rollouts would draw is
    topped up first (stage ``recheck``) with the rollouts' own first samples, so a night
    that goes on to learn reads them back instead of paying twice. Any other task (never
    measured under ``start``, failing, or noisy) ends the check before any call.
    """
    if not tasks or night.cfg.gate.mode == OFF:
        return None
    need = steady_samples(night)
    noise = noise_estimates(night, tasks, start)
    if not all(noise[t.id].steady_pass(1) for t in tasks):
        return None
    short = [t for t in tasks if noise[t.id].samples < need]
    if short:
        jobs = [
            Job(task=t, docs=start, sample_id=k, phase="rollout", fresh=True)
            for t in short
            for k in range(need - noise[t.id].samples)
        ]
        night.begin("recheck")
        results = await night.replayer.run(jobs)
        night.end("recheck", rollouts=len(results))
        if any(r.error or not night.score(r) >= 1.0 for r in results):
            return None  # the night goes on, and its rollouts read these samples back
    scores = {t.id: noise[t.id].low for t in tasks}
    decision = Decision(
        accepted=False, action=GateAction.REJECT.value, baseline=1.0, candidate=1.0,
        final=None, docs=start, applied=[], rejected=[], nothing_to_learn=True,
        start_scores=scores,
    )  # fmt: skip
    sessions = "no new session" if not new_sessions else f"{new_sessions} session(s), no new task"
    spent = (
        f"{len(short)} task(s) topped up to {need} samples ({night.spend.calls} call(s))"
        if short
        else "no model call"
    )
    line = (
        f"quiet night: {sessions}; every one of the {len(tasks)} task(s) already passes under "
        f"the live documents and models ({need}+ agreeing samples each): nothing to learn, {spent}"
    )
    return Quiet(decision=decision, line=line)
