"""The learning stages of a night: rounds of cross-fitted learning, then the final check.

One night's learning (:func:`consolidate`), returning a :class:`Decision`:

1. **Rollouts.** K samples of every learnable task under the live documents: reflection
   material and the baseline. When every task already passes, or there is only one task
   (nothing could be held out), the night stops here with nothing to learn.
2. **Rounds** (up to ``rounds``). Each round deals the tasks into folds and takes each
   target document in turn through :func:`.crossfit.learn_step` (reflect per fold, singles
   on held-out folds, one union of every edit kept so far and the new ones against the
   live documents); a later round starts from the best documents so far, on samples of
   its own. Rounds stop early when every task passes or a settled round kept
   nothing. Once a step kept an edit, a baseline's worth of budget is held back for the
   final check: when the rest runs out mid-round, the steps already finished go to the
   final check instead of the night ending with nothing.
3. **Final check** (:func:`_final`). The best documents against the live ones on every task,
   paired per task and sample; every accepted edit must have been leak-free.

Every stage is journalled in ``run.json`` through the night's :class:`.measure.Measure`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace

from skillopt.errors import BudgetExceededError
from skillopt.gate import decide_paired, next_samples, task_settled
from skillopt.types import (
    EditRecord,
    EditTarget,
    GateAction,
    GateDecision,
    TaskRecord,
)
from skillopt_sleep.night.learn.budget_plan import NOT_TRIED
from skillopt_sleep.night.learn.crossfit import (
    BAND,
    FINAL,
    ROUND,
    Candidate,
    Standing,
    StepResult,
    Trial,
    compare,
    learn_step,
)
from skillopt_sleep.night.learn.decision import Decision
from skillopt_sleep.night.learn.folds import make_folds
from skillopt_sleep.night.learn.gate_modes import GREEDY, OFF, greedy_final, ungated
from skillopt_sleep.night.learn.measure import Budget, Findings, Measure, Tally
from skillopt_sleep.night.learn.samples import Measured
from skillopt_sleep.night.learn.spoilers import promising
from skillopt_sleep.replay import Docs

__all__ = ["Decision", "consolidate", "paired_check"]


FINAL_RESERVE = 3
"""The final check's budget, held back once a step kept an edit, in rollouts' worth."""
FINAL_RESERVE_NOISY = 6
"""The same on a model the noise probe did not find consistent: the final check samples
every task whose pairs disagree again, wave after wave, and a noisy model's disagree
often (three rollouts' worth left nights of 23 tasks at 20 % flips stopped during the
final check with nothing decided, every call before it spent for nothing)."""


def _all_pass(measured: Measured) -> bool:
    return all(v >= 1.0 for values in measured.scores.values() for v in values)


def _settled(rolled: Measured) -> bool:
    """Every task's rollouts agree: the model answers deterministically, so a round that
    kept nothing would keep nothing again. A noisy model gets another round instead: its
    empty round may have missed by chance, and the next one is an independent try (fresh
    rollouts, re-dealt folds, a new reflection)."""
    return all(task_settled(values, values) for values in rolled.scores.values())


def _promised(measure: Measure, round_no: int) -> bool:
    """Whether a single of round ``round_no`` measured a gain too small to keep it and found
    no task worse (:func:`.spoilers.promising`): proposed again in the next round, on folds
    dealt anew, its rule is validated on every fold it was held out from
    (:func:`.crossfit.learn_step`), so that round may keep what this one could not."""
    return any(
        t.round == round_no and t.kind == "single" and promising(t.decision)
        for t in measure.findings.trials
    )


def _disagreeing(rolled: Measured) -> float:
    """The share of tasks whose samples did not all agree."""
    scores = [[v for v in values if v == v] for values in rolled.scores.values()]
    scores = [values for values in scores if len(values) >= 2]
    if not scores:
        return 0.0
    return sum(max(v) - min(v) > 1e-9 for v in scores) / len(scores)


async def _rollouts(
    measure: Measure, stage: str, tasks: Sequence[TaskRecord], docs: Docs, first: int = 0
) -> Measured:
    """K samples of every learnable task under ``docs`` (one where the noise probe or the
    archive says more would repeat it: :mod:`skillopt_sleep.night.quiet.probe`): reflection
    material and baseline."""
    measure.begin(stage)
    measured = await measure.draw_rollouts(tasks, docs, first)
    measure.check_degenerate(stage, measured.results, tasks=tasks)
    measure.noise.first_rollouts(_disagreeing(measured))  # how noisy the model is tonight
    measure.end(stage, rollouts=len(measured.results))
    measure.check_budget(stage)
    return measured


async def consolidate(
    measure: Measure,
    *,
    tasks: Sequence[TaskRecord],
    start: Docs,
    rotation: int,
    carried: Sequence[Candidate] = (),
) -> Decision:
    """Cross-fitted rounds over ``tasks``, then the final paired check against ``start``."""
    if measure.gate.mode == OFF:
        return await ungated(measure, tasks, start)
    before = measure.spend.calls, measure.spend.tokens
    base = await _rollouts(measure, "rollouts", tasks, start)
    reserve = _final_reserve(measure, before)
    folds = make_folds(
        tasks, n_folds=measure.settings.folds, seed=measure.settings.seed, rotation=rotation
    )
    rejected_all = Decision(
        accepted=False, action=GateAction.REJECT, baseline=base.mean(),
        candidate=base.mean(), final=None, docs=start, applied=[], rejected=[],
        folds={t.id: i for i, fold in enumerate(folds) for t in fold},
        start_scores=base.task_means(),
    )  # fmt: skip
    if why := _nothing_to_learn(tasks, base):
        measure.findings.no_edit_reasons.append(why)
        measure.note(why)
        rejected_all.nothing_to_learn = True
        return rejected_all
    learned = _Learned(best=start, measured=base, reserve=reserve)
    with learned.held:
        try:
            await _learn_rounds(measure, tasks, start, folds, rotation, carried, learned)
        except BudgetExceededError as exc:
            if not learned.applied:
                raise
            rejected_all.budget_stop = (
                f"{exc}; the rounds stopped during {measure.stage} (it and the rest of the "
                f"rounds did not finish); the {len(set(learned.applied))} edit(s) kept so far "
                "went to the final check, on the budget held back for it"
            )
            measure.findings.notes.append(rejected_all.budget_stop)
    _say_untried(measure.findings, measure.spend, rejected_all)
    applied = list(dict.fromkeys(learned.applied))
    untested = learned.untested
    rejected = [
        e for e in dict.fromkeys(learned.proposed) if e not in applied and e not in untested
    ]
    rejected_all.rejected = rejected
    rejected_all.untested = [c for e, c in untested.items() if e not in applied]
    if not applied:
        if untested and not rejected:
            rejected_all.action = GateAction.UNTESTED
        return rejected_all
    return await _final(measure, tasks, start, learned.best, applied, rejected_all)


def _final_reserve(measure: Measure, before: tuple[int, int]) -> tuple[int, int]:
    """The (calls, tokens) held back through the rounds for the final check, from what the
    first rollouts cost since ``before``: both of its arms are drawn anew (two baselines'
    worth), and a noisy task draws more pairs (half as much again; twice all that on a
    model not found consistent, :data:`FINAL_RESERVE_NOISY`)."""
    times = FINAL_RESERVE if measure.noise.consistent_tonight else FINAL_RESERVE_NOISY
    return (
        times * (measure.spend.calls - before[0]),
        times * (measure.spend.tokens - before[1]),
    )


def _nothing_to_learn(tasks: Sequence[TaskRecord], base: Measured) -> str:
    """Why the night learns nothing from these rollouts ("" when it can learn)."""
    if _all_pass(base):
        return (
            f"every one of the {len(tasks)} task(s) already passes under the live documents: "
            "nothing to learn tonight"
        )
    if len(tasks) < 2:
        return (
            "only one learnable task: nothing can be held out from its own reflection "
            "(cross-fitting needs at least two tasks), so no edit is proposed"
        )
    return ""


def _say_untried(findings: Findings, spend: Tally, decision: Decision) -> None:
    """The edits a tight budget left untried, in the notes and the decision's budget stop."""
    untried = sum(t.note == NOT_TRIED for t in findings.trials)
    if not untried:
        return
    more = (
        f"{untried} proposed edit(s) were not tried: the budget left covered no test of "
        "them (carried to a later night)"
    )
    stop = decision.budget_stop
    decision.budget_stop = f"{stop}; {more}" if stop else f"{spend.spent()}: {more}"
    findings.notes.append(more)


@dataclass
class _Learned:
    """What the rounds kept so far: every field changes only when a target's step ends.
    Once a step kept an edit, ``reserve`` (calls, tokens) is held back from the budget for
    the final check from the budget it spends from, until ``held`` closes."""

    best: Docs
    measured: Measured
    reserve: tuple[int, int]
    applied: list[EditRecord] = field(default_factory=list)
    gains: dict[EditRecord, dict[str, float]] = field(default_factory=dict)  # of ``applied``
    proposed: list[EditRecord] = field(default_factory=list)
    untested: dict[EditRecord, Candidate] = field(default_factory=dict)
    held: ExitStack = field(default_factory=ExitStack)
    holding: bool = False

    def keep(self, budget: Budget, step: StepResult) -> None:
        self.best, self.measured = step.best, step.measured
        self.applied, self.gains = list(step.accepted), step.gains  # a step holds every kept edit
        self.proposed.extend(step.proposed)
        for cand in step.untested:
            self.untested.setdefault(cand.edit, cand)
        if self.applied and not self.holding:
            self.holding = True
            self.held.enter_context(budget.holding_back(*self.reserve))


async def _learn_rounds(
    measure: Measure, tasks: Sequence[TaskRecord], start: Docs, folds: list[list[TaskRecord]],
    rotation: int, carried: Sequence[Candidate], learned: _Learned,
) -> None:  # fmt: skip
    """Up to ``rounds`` rounds from ``start``, each target in turn; ``learned``
    holds what every finished step kept (so a budget stop mid-step loses only that step)."""
    settings = measure.settings
    targets = [t for t, on in ((EditTarget.SKILL, settings.evolve_skill),
                               (EditTarget.MEMORY, settings.evolve_memory)) if on]  # fmt: skip
    rolled = learned.measured  # the current round's rollouts
    round_start = start
    for round_no in range(1, measure.settings.rounds + 1):
        best, measured = learned.best, learned.measured
        untried = any(t.note == NOT_TRIED for t in measure.findings.trials)
        if round_no > 1 and (
            untried or _all_pass(measured)
            or (best == round_start and _settled(rolled) and not _promised(measure, round_no - 1))
        ):  # fmt: skip
            why = (
                "the budget left covers no more tests" if untried
                else "every task passes" if _all_pass(measured) else "nothing changed"
            )  # fmt: skip
            measure.findings.notes.append(
                f"rounds {round_no}-{measure.settings.rounds} skipped: {why}"
            )
            break
        round_start = best
        first_id = (round_no - 1) * ROUND  # each round draws samples of its own
        if round_no > 1:
            learned.measured = rolled = await _rollouts(
                measure, f"round{round_no}.rollouts", tasks, best, first_id
            )
            folds = make_folds(tasks, n_folds=measure.settings.folds, seed=measure.settings.seed,
                               rotation=rotation * 100 + round_no)  # fmt: skip
        for band, target in enumerate(targets):
            if learned.measured is not rolled and (
                len(next(iter(learned.measured.scores.values()), ()))
                < measure.settings.dream_rollouts
            ):  # a step kept an edit: its union's samples are no rollouts to reflect on
                learned.measured = await _rollouts(
                    measure, f"round{round_no}.rollouts_{target.value}", tasks, learned.best,
                    first_id,
                )  # fmt: skip
            step = await learn_step(
                measure, round_no=round_no, targets=(target,), tasks=tasks, best=learned.best,
                base=learned.measured, folds=folds, carried=carried if round_no == 1 else (),
                first_id=first_id, band=band * BAND,
                standing=Standing(start=start, kept=tuple(dict.fromkeys(learned.applied)),
                                  gains=learned.gains),
            )  # fmt: skip
            learned.keep(measure.budget, step)


async def paired_check(
    measure: Measure, tasks: Sequence[TaskRecord], start: Docs, best: Docs, *, offset: int = FINAL
) -> GateDecision:
    """``best`` against ``start`` on every task, paired per task and sample, both arms on
    samples of their own from ``offset`` (:data:`.crossfit.FINAL`; no earlier decision saw
    them, not even the union whose documents are checked): the night's final check
    (``adopt --edit`` checks a subset of a night's edits with it too, from :data:`ADOPT`)."""
    plan = functools.partial(next_samples, config=measure.gate, thin_tasks=True)
    b, c = await compare(measure, tasks, start, best, phase="final", plan=plan, offset=offset)
    measure.check_degenerate("final", c.results, candidate=True)
    return decide_paired(b.scores, c.scores, config=measure.gate, terminal=True,
                         task_ids=[t.id for t in tasks], confirm_from=c.confirm_from)  # fmt: skip


async def _final(
    measure: Measure,
    tasks: Sequence[TaskRecord],
    start: Docs,
    best: Docs,
    applied: list[EditRecord],
    decision: Decision,
) -> Decision:
    """The best documents against the live ones on every task, paired, on samples of its
    own; every accepted edit must have been leak-free.
    ``gate.mode = "greedy"`` skips this check."""
    if measure.gate.mode == GREEDY:
        return greedy_final(decision, best, applied)
    measure.begin("final")
    final = await paired_check(measure, tasks, start, best)
    leaks = [
        e.content[:80] for t in measure.findings.trials if t.kind == "single" and t.decision
        and t.decision.accepted and t.decision.leaked for e in t.edits
    ]  # fmt: skip
    if leaks and final.accepted:
        final = replace(final, action=GateAction.REJECT_UNVERIFIED, accepted=False, leaked=True)
    final.arithmetic["per_edit_leak_check"] = {"edits": len(applied), "leaked": leaks}
    measure.findings.trials.append(
        Trial(name="final", kind="final", round=measure.settings.rounds, target="both",
              edits=applied, applied=applied, unmatched=[], decision=final,
              note="the night's best documents against the live ones, paired per task and sample")
    )  # fmt: skip
    measure.end("final", accepted=final.accepted)
    decision.final = final
    decision.action = final.action
    decision.baseline, decision.candidate = final.baseline, final.candidate
    if final.accepted:
        decision.accepted, decision.docs, decision.applied = True, best, applied
    else:
        decision.rejected = list(dict.fromkeys([*decision.rejected, *applied]))
    return decision
