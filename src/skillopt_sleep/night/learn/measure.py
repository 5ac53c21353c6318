"""What the learning modules may see of a night: a :class:`Measure`, never the whole night.

The learning modules (:mod:`.rounds`, :mod:`.crossfit`, :mod:`.budget_plan`,
:mod:`.gate_modes`) decide which edits to keep. They need to draw samples, score them, say
where a stage begins and ends, spend within the budget, reflect, and record what they
found; nothing else of the night (its run directory, config file, harvest, report). One
call of theirs, as this object sees it:

1. :meth:`Measure.begin` names the stage (the night journals it through its
   :class:`StageJournal`; a hand-built Measure keeps the names).
2. Samples come from :attr:`Measure.replayer` (tasks under documents, judged, read back
   when already drawn); a wave of rollouts from :meth:`Measure.draw_rollouts` (the night's
   noise probe, or K fresh samples per task); each is scored by :meth:`Measure.score`
   under the one :class:`~skillopt.gate.GateConfig`.
3. Reflection goes through :meth:`Measure.reflect` (the night checkpoints it).
4. The checks (:meth:`check_degenerate`, :meth:`check_reflections`, :meth:`check_budget`,
   :meth:`check_waiting`) stop the stage on an outage, an exhausted budget or a handoff
   answer still missing.
5. What was found goes to :attr:`Measure.findings` (trials, notes, no-edit reasons, rules
   found harmful); what tonight showed of the model's noise to :attr:`Measure.noise`, whose
   methods are its only writers. :meth:`Measure.end` closes the stage.

A night builds one over its own parts (:class:`skillopt_sleep.night.night_state.Night`);
a test builds one over a pool and a reflect function, with no run directory and no config.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from skillopt.errors import (
    AnswerPendingError,
    BudgetExceededError,
    RunFailedError,
    WaitingForAnswersError,
)
from skillopt.gate import GateConfig, task_scores
from skillopt.types import EditTarget, RolloutResult, TaskRecord
from skillopt_sleep.night.learn.judging import check_judging
from skillopt_sleep.night.learn.samples import Measured, sample_all
from skillopt_sleep.night.learn.trials import Trial
from skillopt_sleep.reflect import ReflectOutcome, RolloutSet
from skillopt_sleep.replay import JUDGE_ERROR, Arm, Docs, Replayer

__all__ = [
    "MAX_ERROR_SHARE",
    "Budget",
    "Draw",
    "Findings",
    "LearnSettings",
    "Measure",
    "Noise",
    "StageJournal",
    "Tally",
    "pending_failures",
]

MAX_ERROR_SHARE = 0.5
"""A stage whose rollouts failed beyond this share is an outage; below it the night goes on
without the failed ones (a call lost after its retries, a task an endpoint always refuses)."""

Reflect = Callable[[str, EditTarget, Docs, Sequence[RolloutSet]], Awaitable[ReflectOutcome]]
"""``reflect(key, target, docs, sets)``: one reflection, keyed for checkpointing."""
Draw = Callable[[Sequence[TaskRecord], Docs, int], Awaitable[Measured]]
"""``draw(tasks, docs, first)``: one wave of rollouts, sample ids from ``first``."""


class Tally(Protocol):
    """What learning counts its own spending by: the calls and tokens it made so far."""

    calls: int
    tokens: int

    def spent(self) -> str: ...


class Budget(Tally, Protocol):
    """The budget learning spends from (a night's spend cap,
    :class:`skillopt.backends.wrappers.BudgetCompleter`): its caps (0 = none) and what was
    spent against them, whether one was reached, and a reserve held back for what must
    follow."""

    max_calls: int
    max_tokens: int
    holding: bool

    @property
    def exhausted(self) -> bool: ...

    def stopped(self) -> str: ...

    def holding_back(self, calls: int, tokens: int) -> AbstractContextManager[None]: ...

    def accounting(self) -> dict[str, Any]: ...


def pending_failures(accounting: Mapping[str, Any]) -> int:
    """Calls of a pool's accounting that ended waiting for an answer (0 without handoff)."""
    failures = accounting.get("total", {}).get("failures", {})
    return int(failures.get(AnswerPendingError.error_class_name, 0))


class StageJournal(Protocol):
    """Where stages are journalled (the night's run directory, progress and observer)."""

    def stage_began(self, name: str) -> None: ...

    def stage_ended(self, name: str, **extra: Any) -> None: ...


class _Names:
    """A journal that only remembers the stages, in order (a hand-built Measure's)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def stage_began(self, name: str) -> None:
        self.names.append(name)

    def stage_ended(self, name: str, **extra: Any) -> None:
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class LearnSettings:
    """The ``[night]`` settings learning reads: rounds, folds, what may change, rollouts."""

    rounds: int = 3
    folds: int = 3
    seed: int = 0
    evolve_skill: bool = True
    evolve_memory: bool = True
    dream_rollouts: int = 4
    max_judge_failures: int = 0


@dataclass
class Findings:
    """What the learning stages found: the report reads it at the end."""

    trials: list[Trial] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    no_edit_reasons: list[str] = field(default_factory=list)
    # rules singles found significantly worse tonight (trials.harm_key -> the trials):
    # found so twice and proposed again, they are rejected without a test
    harmful_edits: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    # rules an attribution or masking test dropped tonight (trials.harm_key -> the trial):
    # they cancelled what other edits gained, and are not tried again tonight
    spoilers: dict[tuple[str, str, str], str] = field(default_factory=dict)
    # rules dropped from a union tonight as its likeliest spoiler without a significant
    # test (spoilers._suspect), with the rounds that did: not tried again in such a round,
    # and a second time makes it a spoiler
    suspects: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)
    # per rule (trials.harm_key), the tasks every reflection that proposed it tonight saw:
    # a rule proposed again is validated on every task one of them did not see
    seen_by: dict[tuple[str, str, str], frozenset[str]] = field(default_factory=dict)
    lost_tasks: set[str] = field(default_factory=set)  # none of whose calls answered
    proposed: list[int] = field(default_factory=list)  # candidate edits, per round


@dataclass
class Noise:
    """What tonight showed of the model's noise, and whether the budget is tight. Only its
    methods change it: the probe's verdict, the first rollouts' disagreement, the
    estimate's warning."""

    consistent_tonight: bool | None = None  # the noise probe's verdict (None: not probed)
    seen: float | None = None  # the share of tasks whose first rollouts disagreed
    tight_budget: bool = False  # the estimate says the budget will cut the night short
    on_first_rollouts: Callable[[float], None] | None = None  # hears ``seen`` once

    def probed(self, consistent: bool) -> None:
        self.consistent_tonight = consistent

    def first_rollouts(self, disagreeing: float) -> None:
        """The share of tasks whose first rollouts disagreed (kept once, and told)."""
        if self.seen is not None:
            return
        self.seen = disagreeing
        if self.on_first_rollouts is not None:
            self.on_first_rollouts(disagreeing)

    def budget_is_tight(self) -> None:
        self.tight_budget = True


class Measure:
    """The night as the learning modules see it (see the module docstring)."""

    def __init__(
        self,
        *,
        gate: GateConfig,
        replayer: Replayer,
        spend: Budget,
        reflect: Reflect,
        budget: Budget | None = None,
        settings: LearnSettings | None = None,
        journal: StageJournal | None = None,
        draw: Draw | None = None,
        note: Callable[[str], None] | None = None,
        handoff: bool = False,
        findings: Findings | None = None,
        noise: Noise | None = None,
    ) -> None:
        self.gate = gate
        self.replayer = replayer
        # what this learning spent (its own calls), and the budget it spends from: the
        # night's own, or a parent night's for a child night (:mod:`..skills`)
        self.spend: Tally = spend
        self.budget: Budget = budget or spend
        self.settings = settings or LearnSettings()
        self.journal: StageJournal = journal or _Names()
        self.findings = findings or Findings()
        self.noise = noise or Noise()
        self.handoff = handoff
        self.stage = ""
        self._reflect = reflect
        self._draw = draw
        self._note = note
        # hears each round's candidate edits (round, edits), before any is tried
        self.on_proposed: Callable[[int, int], None] | None = None
        self._read_back_noted = False  # the note that read-back turned off was written

    # -- scores ----------------------------------------------------------------------

    def score(self, result: RolloutResult) -> float:
        """One rollout's gate score (a failed call scores 0)."""
        return 0.0 if result.error else self.gate.score(result.hard, result.soft)

    def mean_score(self, results: Sequence[RolloutResult]) -> float:
        """The mean over tasks of each task's mean gate score (tasks with no usable sample
        left out; 0 when none has one)."""
        per = [v for v in task_scores(results, config=self.gate).values() if v == v]
        return sum(per) / len(per) if per else 0.0

    # -- stages ----------------------------------------------------------------------

    def begin(self, name: str) -> None:
        self.stage = name
        self.journal.stage_began(name)

    def end(self, name: str, **extra: Any) -> None:
        self.note_read_back_off()
        self.check_waiting(name)
        self.journal.stage_ended(name, **extra)

    # -- read back, do not re-ask (:mod:`skillopt_sleep.stand_in`) ---------------------

    def baseline_arm(self) -> Arm:
        """How a sample that is no decision's candidate is drawn: on a night the probe
        judged consistent, read back from its (task, documents)' known answer (the model
        would repeat it); otherwise asked, as on a noisy or unprobed night."""
        self.note_read_back_off()
        return Arm.READ_BACK if self.noise.consistent_tonight is True else Arm.ASKED

    def note_read_back_off(self) -> None:
        """Once, on a consistent night: say that two real answers of one pair disagreed,
        where, and that read-back is off for the rest of the night (the replayer turned it
        off as it saw them; a noisy night never had it on, and says nothing)."""
        off = self.replayer.stand_ins.off
        if not off or self._read_back_noted or self.noise.consistent_tonight is not True:
            return
        self._read_back_noted = True
        note = (
            f"read-back turned off for the rest of the night in stage {self.stage or '-'}: "
            f"two answers of one task under the same documents disagreed ({off}), so the "
            "model is not as consistent as the noise probe found"
        )
        self.findings.notes.append(note)
        self.note(note)

    def note(self, text: str) -> None:
        """Tell the user now (the progress line); the report reads ``findings``."""
        if self._note is not None:
            self._note(text)

    def proposed(self, round_no: int, edits: int) -> None:
        """A round's reflections (and the edits carried from earlier nights) proposed
        ``edits`` candidate edits, before any was tried: the night revises its estimate."""
        self.findings.proposed.append(edits)
        if self.on_proposed is not None:
            self.on_proposed(round_no, edits)

    async def reflect(
        self, key: str, target: EditTarget, docs: Docs, sets: Sequence[RolloutSet]
    ) -> ReflectOutcome:
        return await self._reflect(key, target, docs, sets)

    async def draw_rollouts(
        self, tasks: Sequence[TaskRecord], docs: Docs, first: int = 0
    ) -> Measured:
        """One wave of rollouts (the night's noise probe decides how many per task;
        without one, K = ``max(dream_rollouts, samples_per_task)`` fresh samples)."""
        if self._draw is not None:
            return await self._draw(tasks, docs, first)
        k = max(self.settings.dream_rollouts, self.gate.samples_per_task)
        return await sample_all(self, tasks, docs, samples=k, phase="rollout", first=first)

    # -- checks ----------------------------------------------------------------------

    def waiting(self) -> int:
        """Calls that found no answer in handoff mode (0 with a model, without reading the
        pool's accounting: the gate asks before every sampling wave)."""
        return pending_failures(self.budget.accounting()) if self.handoff else 0

    def check_waiting(self, stage: str) -> None:
        """Handoff mode: once a stage has asked every call it could, stop the night if any
        of them waits for an answer (nothing decided from a missing reply is kept)."""
        if pending := self.waiting():
            raise WaitingForAnswersError(stage, pending)

    def check_budget(self, stage: str) -> None:
        if self.budget.exhausted:
            raise self.budget_stop(stage)

    def budget_stop(self, stage: str) -> BudgetExceededError:
        """The error that ends a stage the budget cut short (saying which cap)."""
        return BudgetExceededError(self.budget.stopped() or f"budget reached during {stage}")

    def check_degenerate(
        self,
        stage: str,
        results: Sequence[RolloutResult],
        *,
        candidate: bool = False,
        tasks: Sequence[TaskRecord] = (),
    ) -> None:
        """Fail the night on an outage; go on without a few errored rollouts.

        A budget that ran out is no call failure: the stage's results are incomplete, so
        the night stops there as budget-reached. Otherwise, errored rollouts are left out
        of every score (the gate skips them); the night fails only when more than
        :data:`MAX_ERROR_SHARE` of the stage's rollouts errored. A task none of whose
        rollouts answered (an endpoint that always refuses it) is named in the notes.
        ``candidate``: results under a candidate document, whose empty answers may be the
        edit's own (bad) effect rather than an outage; ``tasks`` name the lost ones."""
        self.check_waiting(stage)
        if not results:
            return
        errors = [r for r in results if r.error]
        if errors and self.budget.exhausted:
            raise self.budget_stop(stage)
        if len(errors) > MAX_ERROR_SHARE * len(results):
            cause = Counter(r.error for r in errors).most_common(1)[0][0]
            lost = _lost_tasks(results)
            named = f"; no answer at all for {_names(lost)}" if lost and len(errors) < len(
                results) else ""  # fmt: skip
            raise RunFailedError(stage, f"{_failure_share(results, errors)}: {cause}{named}")
        if not candidate and all(not r.response.strip() for r in results):
            raise RunFailedError(stage, "every rollout came back empty")
        self._name_lost(results, tasks)
        check_judging(stage, self.replayer.judging, limit=self.settings.max_judge_failures)

    def _name_lost(self, results: Sequence[RolloutResult], tasks: Sequence[TaskRecord]) -> None:
        intents = {t.id: t.intent for t in tasks}
        for task, cause in _lost_tasks(results).items():
            if task in self.findings.lost_tasks:
                continue
            self.findings.lost_tasks.add(task)
            asked = " ".join(intents.get(task, "").split())
            said = (
                f'task {task} ("{asked[:60]}{"..." if len(asked) > 60 else ""}")'
                if asked
                else f"task {task}"
            )
            note = (
                f"{said} could not be run ({cause}): every one of its calls failed, so "
                "tonight decides without it"
            )
            self.findings.notes.append(note)
            self.note(note)

    def check_reflections(self, stage: str, outcomes: Sequence[ReflectOutcome]) -> None:
        """Fail the night when every reflection call of a stage failed (an outage)."""
        self.check_waiting(stage)
        asked = [o for o in outcomes if o.calls]
        failed = [o for o in asked if not o.edits and o.errors and not o.raw]
        if asked and len(failed) == len(asked):
            self.check_budget(stage)
            calls = sum(o.calls for o in failed)
            errors = [e for o in failed for e in o.errors]
            # an open circuit is a consequence: name the failure that opened it
            root = next((e for e in errors if not e.startswith("NoHealthyMemberError")), errors[-1])
            raise RunFailedError(stage, f"every reflection call failed ({calls}): {root}")


def _lost_tasks(results: Sequence[RolloutResult]) -> dict[str, str]:
    """Task id -> the error of each task none of whose rollouts answered."""
    by_task: dict[str, list[str]] = {}
    for r in results:
        by_task.setdefault(r.task_id, []).append(r.error)
    return {t: errs[0] for t, errs in by_task.items() if all(errs)}


def _failure_share(results: Sequence[RolloutResult], errors: Sequence[RolloutResult]) -> str:
    """How many rollouts failed and where: answering the task, or judging its answer (the
    answer came back; only the judge's call failed)."""
    judging = sum(1 for r in errors if r.error.startswith(JUDGE_ERROR))
    answering = len(errors) - judging
    if len(errors) == len(results) and not judging:
        return f"every model call failed ({len(errors)} calls)"
    if len(errors) == len(results) and not answering:
        return f"every judge call failed: {len(errors)} answers came back and none could be judged"
    share = (
        "every rollout failed" if len(errors) == len(results)
        else f"{len(errors)} of {len(results)} rollouts failed"
    )  # fmt: skip
    if judging and answering:
        return f"{share} ({answering} answering, {judging} judging the answer)"
    return f"{share} (judging the answer)" if judging else share


def _names(tasks: dict[str, str], most: int = 5) -> str:
    names = ", ".join(sorted(tasks)[:most])
    return names + (f" and {len(tasks) - most} more" if len(tasks) > most else "")
