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
3. **Plan** (:func:`plan_quiet`, no call): when every task tonight passed on every
   recorded sample of tonight's question, the night may be quiet. Tasks with fewer
   samples than the rollouts stage would draw (``max(night.dream_rollouts,
   gate.samples_per_task)``; typically the night after an adoption, whose documents the
   gate's final check sampled once) are to be re-sampled, with the rollouts' own first
   samples. The night's estimate is printed after the plan, before any call.
4. **Settle** (:func:`settle_quiet`): the missing samples drawn (stage ``recheck``), the
   rollouts could only find that every task already passes, and the night would stop
   there with nothing to learn. It stops before them instead, with the same decision,
   built from the records. When a re-sampled task fails, the night goes on as any other
   and its rollouts read those samples back.

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

__all__ = [
    "Quiet",
    "QuietPlan",
    "keep_samples",
    "noise_estimates",
    "plan_quiet",
    "settle_quiet",
    "steady_samples",
]


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
class QuietPlan:
    """A night that looks quiet by the records: each task's recorded samples under the
    live documents (``live``), and the samples still to draw (``recheck``) before it is."""

    docs: Docs
    live: Mapping[str, NoiseEstimate]
    recheck: tuple[Job, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Quiet:
    """A quiet night: the decision from the records, and the one line that says so."""

    decision: Decision
    line: str


def plan_quiet(night: Night, tasks: Sequence[TaskRecord], start: Docs) -> QuietPlan | None:
    """Whether tonight may be quiet, without a call: every task in ``tasks`` passed on
    every recorded sample under ``start`` and tonight's models (one at least). Tasks with
    fewer samples than the rollouts would draw get the rollouts' own first samples to draw
    (so a night that goes on to learn reads them back instead of paying twice). Any other
    task (never measured under ``start``, failing, or noisy) makes it ``None``."""
    if not tasks or night.cfg.gate.mode == OFF:
        return None
    need = steady_samples(night)
    live = noise_estimates(night, tasks, start)
    if not all(live[t.id].steady_pass(1) for t in tasks):
        return None
    recheck = tuple(
        Job(task=t, docs=start, sample_id=k, phase="rollout", fresh=True)
        for t in tasks
        for k in range(max(0, need - live[t.id].samples))
    )
    return QuietPlan(docs=start, live=live, recheck=recheck)


async def settle_quiet(night: Night, plan: QuietPlan, *, new_sessions: int) -> Quiet | None:
    """Draw ``plan``'s samples (stage ``recheck``); the night's decision when every one
    passed too, else ``None`` (the night goes on, and its rollouts read them back)."""
    if plan.recheck:
        night.begin("recheck")
        results = await night.replayer.run(plan.recheck)
        night.end("recheck", rollouts=len(results))
        if any(r.error or not night.score(r) >= 1.0 for r in results):
            return None
    decision = Decision(
        accepted=False, action=GateAction.REJECT.value, baseline=1.0, candidate=1.0,
        final=None, docs=plan.docs, applied=[], rejected=[], nothing_to_learn=True,
        start_scores={tid: est.low for tid, est in plan.live.items()},
    )  # fmt: skip
    sessions = "no new session" if not new_sessions else f"{new_sessions} session(s), no new task"
    topped = len({job.task.id for job in plan.recheck})
    spent = f"{topped} task(s) re-sampled" if topped else "no model call"
    line = (
        f"quiet night: {sessions}; every one of the {len(plan.live)} task(s) already passes "
        f"under the live documents and models ({steady_samples(night)}+ agreeing samples "
        f"each): nothing to learn, {spent}"
    )
    return Quiet(decision=decision, line=line)
