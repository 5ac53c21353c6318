"""Quiet nights: answers the archive already holds stand in for rollouts that would only
draw them again.

1. **Keep** (:func:`keep_samples`): after each complete night, every judged fresh sample
   it drew (rollouts, trials, the final check, the test split; the live and the candidate
   documents alike) goes into the archive by the question it answered
   (:mod:`.questions`): a candidate adopted tonight is tomorrow's live documents, and its
   samples are then answers to tomorrow's question.
2. **Top up** (:func:`top_up_staged`, after the decision): a night that stages documents
   has sampled them already (the union's and the final check's samples, the test split);
   when every task passed on each of those, it draws the few more the rollouts stage
   would (stage ``steady``), so the night after the adoption can be quiet. Never when a
   task failed or was not sampled under them (that night measures again anyway), nor when
   the budget has no room; the gate never reads them.
3. **Ask** (:func:`noise_estimates`): per task, how the recorded samples of tonight's
   question agree. A task is never steady on a disagreement: one differing sample under
   the same question, on any night, makes it noisy until the documents or models change.
4. **Plan** (:func:`plan_quiet`, no call): when every task tonight passed on every
   recorded sample of tonight's question, the night may be quiet. Tasks with fewer
   samples than the rollouts stage would draw (``max(night.dream_rollouts,
   gate.samples_per_task)``) are to be re-sampled (``recheck``), with the rollouts' own
   first samples; the night's estimate is printed before those calls. Then the drift
   check: up to ``night.drift_check_calls`` model calls re-sample the tasks steady the
   longest (a provider may change a model under the same name).
5. **Settle** (:func:`settle_quiet`): the planned samples drawn (stage ``recheck``), the
   rollouts could only find that every task already passes, and the night would stop
   there with nothing to learn. It stops before them instead, with the same decision,
   built from the records. When a re-sampled task fails, the night goes on as any other
   (its estimate said first) and its rollouts read those samples back; at commit the
   failing sample makes the task noisy.

Only the live documents' question is answered from records. A candidate is new documents,
so a new question: the gate always measures it, and its held-out validation never reads a
recorded answer.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skillopt.errors import AnswerPendingError
from skillopt.types import GateAction, RolloutResult, TaskRecord
from skillopt_sleep.night.decision import Decision
from skillopt_sleep.night.gate_modes import OFF
from skillopt_sleep.night.questions import answer_key, task_hash
from skillopt_sleep.night.running import Night
from skillopt_sleep.replay import Docs, Job, calls_per_sample
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
    "top_up_staged",
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


def _judged(
    night: Night, tasks: Iterable[TaskRecord], rows: Iterable[Mapping[str, Any]]
) -> Iterator[tuple[TaskRecord, str, int, float]]:
    """(task, documents' hash, sample id, score) of each judged fresh sample in ``rows``
    (rows of ``rollouts.jsonl``) of a task in ``tasks``."""
    by_id = {t.id: t for t in tasks}
    for row in rows:
        task = by_id.get(str(row.get("task_id", "")))
        if task is None or not row.get("fresh") or row.get("error"):
            continue
        result = RolloutResult.from_dict(
            {k: v for k, v in row.items() if k in RolloutResult.__dataclass_fields__}
        )
        score = night.score(result)
        if math.isfinite(score):
            yield task, f"{result.skill_hash}.{result.memory_hash}", result.sample_id, score


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
    answers = [
        SampleAnswer(question=_question(task, docs_hash, key), sample_id=sample_id, score=score)
        for task, docs_hash, sample_id, score in _judged(night, tasks, rows)
    ]
    return archive.record_answers(answers, night=night_no, run_id=night.run.run_id,
                                  now=night.clock())  # fmt: skip


def _top_up_jobs(
    night: Night, tasks: Sequence[TaskRecord], docs: Docs, rows: Sequence[Mapping[str, Any]]
) -> tuple[Job, ...]:
    """The samples of ``docs`` still missing for every task in ``tasks`` to be steady under
    them (tonight's ``rows`` and the archive's records counted), with sample ids no
    sample of them tonight has (distinct answers, never a read-back). None unless every
    task passed on every sample of ``docs`` it has (one at least): otherwise the night
    after their adoption measures again whatever is drawn now."""
    if not tasks or night.cfg.gate.mode == OFF or night.archive is None:
        return ()
    if not answer_key(night.cfg):
        return ()
    recorded = noise_estimates(night, tasks, docs)
    scores: dict[str, list[float]] = defaultdict(list)
    for task, docs_hash, _, score in _judged(night, tasks, rows):
        if docs_hash == docs.key:
            scores[task.id].append(score)
    used: dict[str, set[int]] = defaultdict(set)  # an errored sample's id is taken too
    for row in rows:
        if row.get("error_class") == AnswerPendingError.error_class_name:
            continue  # handoff: a prompt that waited for its answer, answered in a later row
        if row.get("fresh") and f"{row.get('skill_hash')}.{row.get('memory_hash')}" == docs.key:
            used[str(row.get("task_id", ""))].add(int(row.get("sample_id", 0)))
    need = steady_samples(night)
    jobs: list[Job] = []
    for task in tasks:
        before, tonight = recorded[task.id], scores[task.id]
        if not before.samples and not tonight:
            return ()
        if (before.samples and not before.steady_pass(1)) or min(tonight, default=1.0) < 1.0:
            return ()
        ids = (k for k in range(need + len(used[task.id])) if k not in used[task.id])
        missing = need - before.samples - len(tonight)
        jobs += [Job(task=task, docs=docs, sample_id=next(ids), phase="steady", fresh=True)
                 for _ in range(max(0, missing))]  # fmt: skip
    return tuple(jobs)


def _affordable(night: Night, calls: int) -> bool:
    """Whether ``calls`` more model calls stay within the night's caps (tokens priced at
    tonight's mean so far)."""
    spend = night.spend
    if spend.max_calls and spend.calls + calls > spend.max_calls:
        return False
    per_call = spend.tokens / spend.calls if spend.calls else 0.0
    return not (spend.max_tokens and spend.tokens + calls * per_call > spend.max_tokens)


async def top_up_staged(
    night: Night, tasks: Sequence[TaskRecord], decision: Decision | None
) -> int:
    """After the decision: draw what :func:`_top_up_jobs` names for the documents tonight
    stages (stage ``steady``), so the night after their adoption can be quiet instead of
    drawing them itself (judge calls of answers seen tonight come from the response
    cache). Nothing on a night that stages nothing, stopped on its budget or has no room
    left for them. Returns how many samples were drawn."""
    if decision is None or not decision.accepted or decision.budget_stop or night.dry_run:
        return 0
    jobs = _top_up_jobs(night, tasks, decision.docs, night.run.read_rollouts())
    if not jobs or not _affordable(night, sum(calls_per_sample(j.task) for j in jobs)):
        return 0
    night.begin("steady")
    results = await night.replayer.run(jobs)
    night.end("steady", rollouts=len(results))
    return len(results)


@dataclass(frozen=True, slots=True, kw_only=True)
class QuietPlan:
    """A night that looks quiet by the records: each task's recorded samples under the
    live documents (``live``), the samples still to draw (``recheck``) before it is, and
    the drift check's samples of the tasks steady the longest (``drift``)."""

    docs: Docs
    live: Mapping[str, NoiseEstimate]
    recheck: tuple[Job, ...] = ()
    drift: tuple[Job, ...] = ()


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
    drift = _drift_check(night, tasks, start, live, recheck)
    return QuietPlan(docs=start, live=live, recheck=recheck, drift=drift)


def _drift_check(
    night: Night,
    tasks: Sequence[TaskRecord],
    start: Docs,
    live: Mapping[str, NoiseEstimate],
    recheck: Sequence[Job],
) -> tuple[Job, ...]:
    """One fresh sample (the rollouts' first) of each of the tasks whose newest recorded
    sample is the oldest, as many as ``night.drift_check_calls`` pays for (less what the
    re-check spends: its samples are as fresh). A steady task is otherwise never sampled
    again, and a provider may change a model under the same name."""
    left = night.cfg.night.drift_check_calls - sum(calls_per_sample(j.task) for j in recheck)
    topped = {j.task.id for j in recheck}
    stalest = sorted((t for t in tasks if t.id not in topped),
                     key=lambda t: (live[t.id].last_night, t.id))  # fmt: skip
    chosen: list[Job] = []
    for task in stalest:
        calls = calls_per_sample(task)
        if calls <= left:
            chosen.append(Job(task=task, docs=start, sample_id=0, phase="rollout", fresh=True))
            left -= calls
    return tuple(chosen)


async def settle_quiet(night: Night, plan: QuietPlan, *, new_sessions: int) -> Quiet | None:
    """Draw ``plan``'s samples (stage ``recheck``); the night's decision when every one
    passed too, else ``None`` (the night goes on, and its rollouts read them back). A
    drift sample that could not be drawn (a call error) checks nothing and changes
    nothing."""
    jobs = (*plan.recheck, *plan.drift)
    calls = 0
    drifted = errored = 0
    if jobs:
        night.begin("recheck")
        before = night.spend.calls
        results = await night.replayer.run(jobs)
        calls = night.spend.calls - before
        night.end("recheck", rollouts=len(results))
        topped, drift = results[: len(plan.recheck)], results[len(plan.recheck) :]
        if any(r.error or not night.score(r) >= 1.0 for r in topped):
            return None
        drifted = sum(1 for r in drift if not r.error and not night.score(r) >= 1.0)
        errored = sum(1 for r in drift if r.error)
        if drifted:
            _log_drift(night, drifted, len(drift))
            return None
    decision = Decision(
        accepted=False, action=GateAction.REJECT.value, baseline=1.0, candidate=1.0,
        final=None, docs=plan.docs, applied=[], rejected=[], nothing_to_learn=True,
        start_scores={tid: est.low for tid, est in plan.live.items()},
    )  # fmt: skip
    sessions = "no new session" if not new_sessions else f"{new_sessions} session(s), no new task"
    line = (
        f"quiet night: {sessions}; every one of the {len(plan.live)} task(s) already passes "
        f"under the live documents and models ({steady_samples(night)}+ agreeing samples "
        f"each): nothing to learn, {_spent(plan, calls, errored)}"
    )
    return Quiet(decision=decision, line=line)


def _spent(plan: QuietPlan, calls: int, errored: int) -> str:
    """What the quiet night's calls bought, for its one line."""
    if not plan.recheck and not plan.drift:
        return "no model call"
    parts = []
    topped = len({job.task.id for job in plan.recheck})
    if topped:
        parts.append(f"{topped} task(s) re-sampled")
    checked = len(plan.drift) - errored
    if checked:
        parts.append(f"drift check: {checked} task(s) steady the longest re-sampled, unchanged")
    if errored:
        parts.append(f"{errored} drift sample(s) not drawn (call errors)")
    return f"{'; '.join(parts)} ({calls} model call{'s' if calls != 1 else ''})"


def _log_drift(night: Night, drifted: int, checked: int) -> None:
    note = (
        f"drift check: {drifted} of the {checked} task(s) steady the longest under the live "
        "documents and models failed when re-sampled (the model may have changed under the "
        "same name): they count as noisy from now on, and the night measures everything again"
    )
    night.notes.append(note)
    night.progress.note(note)
