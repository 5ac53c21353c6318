"""Quiet nights: answers the archive already holds stand in for rollouts that would only
draw them again.

1. **Keep** (:func:`keep_samples`): after each complete night, every judged fresh sample
   it drew (rollouts, trials, the final check, the test split; the live and the candidate
   documents alike) goes into the archive by the question it answered
   (:mod:`.questions`): a candidate adopted tonight is tomorrow's live documents, and its
   samples are then answers to tomorrow's question.
2. **Top up** (:func:`top_up_staged`, after the decision): a night that stages documents
   has sampled them already (the union's and the final check's samples, the test split,
   a project skill's own final check); when every task of every group passed on each of
   those under the documents it runs under once they are adopted, it draws the few more
   the rollouts stage would (stage ``steady``), so the night after the adoption can be
   quiet. Never when a task failed or was not sampled under them (that night measures
   again anyway), nor when the budget has no room; the gate never reads them.
3. **Ask** (:func:`noise_estimates`): per task, how the recorded samples of tonight's
   question agree. A task is never steady on a disagreement: one differing sample under
   the same question, on any night, makes it noisy until the documents or models change.
4. **Plan** (:func:`plan_quiet`, no call): tonight's tasks come in groups (:class:`Asked`),
   each with the documents its night measures it under: the managed skill and memory's tasks
   and the test split under the live documents, each project skill's tasks under that skill
   and the live memory (:meth:`skillopt_sleep.night.skills.fanout.Fanout.asked`). When every
   task passed on every recorded sample of its group's question, the night may be quiet.
   Tasks with fewer samples than the rollouts stage would draw (``max(night.dream_rollouts,
   gate.samples_per_task)``) are to be re-sampled (``recheck``), with the rollouts' own
   first samples; the night's estimate is printed before those calls. Then the drift check:
   up to ``night.drift_check_calls`` model calls for the whole night re-sample the tasks
   steady the longest, whatever their group (a provider may change a model under the same
   name).
5. **Settle** (:func:`settle_quiet`): the planned samples drawn (stage ``recheck``), the
   rollouts could only find that every task already passes, and the night would stop
   there with nothing to learn. It stops before them instead, with the same decisions
   (each group's), built from the records. When a re-sampled task fails, the night goes
   on as any other (its estimate said first) and its rollouts (a project skill's night's
   too) read those samples back; at commit the failing sample makes the task noisy.

Only the live documents' question is answered from records. A candidate is new documents,
so a new question: the gate always measures it, and its held-out validation never reads a
recorded answer.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skillopt.errors import AnswerPendingError
from skillopt.types import GateAction, RolloutResult, TaskRecord
from skillopt_sleep.night.learn.decision import Decision
from skillopt_sleep.night.learn.gate_modes import OFF
from skillopt_sleep.night.night_state import Night
from skillopt_sleep.night.quiet.questions import answer_key, task_hash
from skillopt_sleep.night.quiet.stuck import stuck_tasks
from skillopt_sleep.replay import Docs, Job, calls_per_sample
from skillopt_sleep.skills.route import MANAGED
from skillopt_sleep.tasks.archive import TaskArchive
from skillopt_sleep.tasks.records import NoiseEstimate, Question, SampleAnswer

__all__ = [
    "Asked",
    "Quiet",
    "QuietPlan",
    "keep_samples",
    "noise_estimates",
    "plan_quiet",
    "settle_quiet",
    "steady_samples",
    "top_up_staged",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Asked:
    """One group of tonight's tasks and the documents its night measures them under: the
    question their samples answer (:mod:`.questions`)."""

    name: str  # a project skill's; MANAGED for the managed skill and memory (test split too)
    tasks: tuple[TaskRecord, ...]
    docs: Docs


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


@dataclass(frozen=True, slots=True)
class _TopUp:
    """The samples a top-up draws: first one of each task no sample of which under its
    group's documents is known yet (``first``), the rest once those passed."""

    first: tuple[Job, ...] = ()
    rest: tuple[Job, ...] = ()


def _top_up_jobs(
    night: Night, groups: Sequence[Asked], rows: Sequence[Mapping[str, Any]]
) -> _TopUp:
    """The samples still missing for every task of every group to be steady under its
    group's documents (tonight's ``rows`` and the archive's records counted). None unless
    every group's can be (:func:`_group_top_up`): the night after the adoption is quiet
    only when all its groups are."""
    if not any(g.tasks for g in groups) or night.cfg.gate.mode == OFF or night.archive is None:
        return _TopUp()
    if not answer_key(night.cfg):
        return _TopUp()
    first: list[Job] = []
    rest: list[Job] = []
    for group in groups:
        more = _group_top_up(night, group, rows)
        if more is None:
            return _TopUp()
        first += more.first
        rest += more.rest
    return _TopUp(tuple(first), tuple(rest))


def _group_top_up(night: Night, group: Asked, rows: Sequence[Mapping[str, Any]]) -> _TopUp | None:
    """The samples of ``group.docs`` still missing for each of its tasks, with sample ids
    no sample of them tonight has (distinct answers, never a read-back). ``None`` when a
    task failed on a sample of them: the night after their adoption measures again
    whatever is drawn now. A task with no sample of them (a project skill's tasks under
    its new version and tonight's new memory: no night measured the two together) gets
    its first sample in ``first``, so the rest are drawn only once it passed."""
    tasks, docs = group.tasks, group.docs
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
    first: list[Job] = []
    rest: list[Job] = []
    for task in tasks:
        before, tonight = recorded[task.id], scores[task.id]
        if (before.samples and not before.steady_pass(1)) or min(tonight, default=1.0) < 1.0:
            return None
        ids = (k for k in range(need + len(used[task.id])) if k not in used[task.id])
        missing = need - before.samples - len(tonight)
        jobs = [Job(task=task, docs=docs, sample_id=next(ids), phase="steady", fresh=True)
                for _ in range(max(0, missing))]  # fmt: skip
        unseen = not before.samples and not tonight
        first += jobs[:1] if unseen else []
        rest += jobs[1:] if unseen else jobs
    return _TopUp(tuple(first), tuple(rest))


def _affordable(night: Night, calls: int) -> bool:
    """Whether ``calls`` more model calls stay within the night's caps (tokens priced at
    tonight's mean so far)."""
    spend = night.spend
    if spend.max_calls and spend.calls + calls > spend.max_calls:
        return False
    per_call = spend.tokens / spend.calls if spend.calls else 0.0
    return not (spend.max_tokens and spend.tokens + calls * per_call > spend.max_tokens)


async def top_up_staged(
    night: Night,
    groups: Sequence[Asked],
    decisions: Sequence[Decision | None],
    *,
    rows: Sequence[Mapping[str, Any]] = (),
) -> int:
    """After the decisions (``decisions``: the managed night's, each project skill's): draw
    what :func:`_top_up_jobs` names for ``groups``, each group with the documents its tasks
    run under once what tonight stages is adopted (stage ``steady``), so the night after
    the adoption can be quiet instead of drawing them itself (judge calls of answers seen
    tonight come from the response cache). ``rows``: the samples the project skills'
    nights drew (their run directories). Nothing on a night that stages nothing, stopped
    on its budget or has no room left for them; the rest of them nothing once one of the
    first samples of a task never sampled under its documents failed. Returns how many
    samples were drawn."""
    made = [d for d in decisions if d is not None]
    if night.dry_run or not any(d.accepted for d in made) or any(d.budget_stop for d in made):
        return 0
    top = _top_up_jobs(night, groups, [*night.run.read_rollouts(), *rows])
    jobs = (*top.first, *top.rest)
    if not jobs or not _affordable(night, sum(calls_per_sample(j.task) for j in jobs)):
        return 0
    night.begin("steady")
    results = await night.replayer.run(top.first)
    if not any(r.error or not night.score(r) >= 1.0 for r in results):
        results += await night.replayer.run(top.rest)
    night.end("steady", rollouts=len(results))
    return len(results)


@dataclass(frozen=True, slots=True, kw_only=True)
class QuietPlan:
    """A night that looks quiet by the records: its groups, each task's recorded samples
    under its group's documents (``live``), the samples still to draw (``recheck``)
    before it is, and the drift check's samples of the tasks steady the longest
    (``drift``); each job carries its group's documents."""

    groups: tuple[Asked, ...]
    live: Mapping[str, NoiseEstimate]
    recheck: tuple[Job, ...] = ()
    drift: tuple[Job, ...] = ()
    stuck: frozenset[str] = frozenset()  # failing, with nothing new to learn from (.stuck)


@dataclass(frozen=True, slots=True, kw_only=True)
class Quiet:
    """A quiet night: each group's decision from the records (by group name, MANAGED for
    the managed skill and memory), and the one line that says so."""

    decisions: Mapping[str, Decision]
    line: str

    @property
    def decision(self) -> Decision:
        """The managed night's decision (the night's, on a night that did not fan out)."""
        return self.decisions[MANAGED]


def plan_quiet(night: Night, groups: Sequence[Asked]) -> QuietPlan | None:
    """Whether tonight may be quiet, without a call: every task of every group passed on
    every recorded sample under its group's documents and tonight's models (one at
    least), or is stuck (:mod:`.stuck`: it failed under every document the nights tried,
    and nothing about it is new). Tasks with fewer samples than the rollouts would draw
    get the rollouts' own first samples to draw (so a night that goes on to learn reads
    them back instead of paying twice). Any other task (never measured under its
    documents, failing with something new, or noisy) makes it ``None``. ``groups`` holds
    the managed one (MANAGED), with tasks or not."""
    tasks = [t for g in groups for t in g.tasks]
    if not tasks or night.cfg.gate.mode == OFF:
        return None
    need = steady_samples(night)
    live: dict[str, NoiseEstimate] = {}
    for group in groups:
        live.update(noise_estimates(night, group.tasks, group.docs))
    failing = [t for t in tasks if not live[t.id].steady_pass(1)]
    docs_of = {t.id: g.docs.key for g in groups for t in g.tasks}
    stuck = stuck_tasks(night, failing, live, docs_of) if failing else frozenset()
    if len(stuck) < len(failing):
        return None
    recheck = tuple(
        Job(task=t, docs=g.docs, sample_id=k, phase="rollout", fresh=True)
        for g in groups
        for t in g.tasks
        for k in range(max(0, need - live[t.id].samples))
    )
    drift = _drift_check(night, groups, live, recheck, stuck)
    return QuietPlan(groups=tuple(groups), live=live, recheck=recheck, drift=drift, stuck=stuck)


def _drift_check(
    night: Night,
    groups: Sequence[Asked],
    live: Mapping[str, NoiseEstimate],
    recheck: Sequence[Job],
    stuck: Collection[str],
) -> tuple[Job, ...]:
    """One fresh sample (the rollouts' first, under its group's documents) of each of the
    tasks whose newest recorded sample is the oldest, whatever their group, as many as
    ``night.drift_check_calls`` pays for (less what the re-check spends: its samples are
    as fresh). A steady task is otherwise never sampled again, and a provider may change a
    model under the same name (a stuck task is not: its failure is what was recorded)."""
    left = night.cfg.night.drift_check_calls - sum(calls_per_sample(j.task) for j in recheck)
    topped = {j.task.id for j in recheck} | set(stuck)
    docs = {t.id: g.docs for g in groups for t in g.tasks}
    stalest = sorted((t for g in groups for t in g.tasks if t.id not in topped),
                     key=lambda t: (live[t.id].last_night, t.id))  # fmt: skip
    chosen: list[Job] = []
    for task in stalest:
        calls = calls_per_sample(task)
        if calls <= left:
            chosen.append(
                Job(task=task, docs=docs[task.id], sample_id=0, phase="rollout", fresh=True)
            )
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
        if any(r.error or _changed(night, r, plan) for r in topped):
            return None
        drifted = sum(1 for r in drift if not r.error and not night.score(r) >= 1.0)
        errored = sum(1 for r in drift if r.error)
        if drifted:
            _log_drift(night, drifted, len(drift))
            return None
    decisions = {group.name: _from_records(group, plan.live) for group in plan.groups}
    sessions = "no new session" if not new_sessions else f"{new_sessions} session(s), no new task"
    passing = len(plan.live) - len(plan.stuck)
    line = (
        f"quiet night: {sessions}; "
        + (
            f"every one of the {passing} task(s) already passes"
            if not plan.stuck
            else f"{passing} of the {len(plan.live)} task(s) already pass"
        )
        + f" under the live documents{_skills(plan)} and models ({steady_samples(night)}+ "
        "agreeing samples each)"
        + (
            f", and {len(plan.stuck)} failed under every document the nights tried, nothing "
            "new about it since (its session, the documents, the models)"
            if plan.stuck
            else ""
        )
        + f": nothing to learn, {_spent(plan, calls, errored)}"
    )
    return Quiet(decisions=decisions, line=line)


def _changed(night: Night, result: RolloutResult, plan: QuietPlan) -> bool:
    """Whether a re-sampled task answered otherwise than recorded: a passing task failed,
    or a stuck one passed."""
    passed = night.score(result) >= 1.0
    return passed if result.task_id in plan.stuck else not passed


def _from_records(group: Asked, live: Mapping[str, NoiseEstimate]) -> Decision:
    """A group's decision on a quiet night: nothing to learn, its scores from the records."""
    scores = {t.id: live[t.id].low for t in group.tasks}
    mean = sum(scores.values()) / len(scores) if scores else 1.0
    return Decision(
        accepted=False, action=GateAction.REJECT, baseline=mean, candidate=mean,
        final=None, docs=group.docs, applied=[], rejected=[], nothing_to_learn=True,
        start_scores=scores,
    )  # fmt: skip


def _skills(plan: QuietPlan) -> str:
    """Which of the live documents, when some of the tasks ran under the project's skills
    (the report names them)."""
    skills = sum(1 for g in plan.groups if g.name != MANAGED and g.tasks)
    return f" (your {skills} skill(s) too, each on its own tasks)" if skills else ""


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
