"""The learning part of a night: rollouts -> cross-fitted rounds -> final paired check.

:class:`Night` holds one running night (run directory, spend-capped pool, replayer,
reflector, gate) and its stage helpers; :func:`consolidate` drives the rounds (each target
document in turn through :func:`skillopt_sleep.crossfit.learn_target`) and the final paired
check of the best documents against the live ones, and returns a :class:`Decision`. Every
stage is journalled in ``run.json``.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from skillopt.errors import BudgetExceededError
from skillopt.gate import decide_paired
from skillopt.paired import task_settled
from skillopt.types import (
    EditRecord,
    EditTarget,
    GateAction,
    GateDecision,
    RolloutResult,
    TaskRecord,
)
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.crossfit import (
    FRESH,
    ROUND,
    Candidate,
    Measured,
    Trial,
    clear_pass,
    compare,
    learn_target,
    make_folds,
    measure,
)
from skillopt_sleep.gate_modes import GREEDY, OFF, greedy_final, ungated
from skillopt_sleep.gating import Gate
from skillopt_sleep.harvest import SELF_MARKER
from skillopt_sleep.judging import check_judging
from skillopt_sleep.observer import NO_OBSERVER, StageObserver
from skillopt_sleep.outcome import NightFailed
from skillopt_sleep.progress import NightProgress
from skillopt_sleep.reflect import Reflector, ReflectOutcome, RolloutSet
from skillopt_sleep.replay import Docs, Job, Replayer
from skillopt_sleep.rundir import RunDir
from skillopt_sleep.spend import ModelPool, SpendEstimate, SpendingPool

Clock = Callable[[], datetime]


def estimate_spend(
    *, n_learn: int, n_test: int, cfg: SleepConfig, rubric_share: float, n_carried: int = 0
) -> SpendEstimate:
    """A rough upper estimate of the night's calls, printed before any spend.

    Rollouts cover every learnable task; each proposed edit is tried alone on its fold
    (so a round's singles cost about ``edit_budget`` passes over the tasks), then the
    union once over every task. Adaptive extra samples are not counted.
    """
    night, gate = cfg.night, cfg.gate
    judge = 1.0 + rubric_share
    targets = int(night.evolve_skill) + int(night.evolve_memory)
    folds = min(night.folds, max(n_learn, 1))
    rollouts = max(night.dream_rollouts, gate.samples_per_task)
    per_pass = n_learn * gate.samples_per_task * judge
    by_stage = {
        "rollouts": int(n_learn * rollouts * judge * night.rounds),
        "reflect": 2 * folds * targets * night.rounds,
        "trials": int(
            (night.edit_budget * per_pass + n_carried * per_pass) * targets * night.rounds
        ),
        "union": int(per_pass * targets * night.rounds),
        "test": int(2 * n_test * judge),
    }
    calls = sum(by_stage.values())
    return SpendEstimate(calls=calls, tokens=calls * 900, by_stage=by_stage)


class Night:
    """The state of one night while it runs. Use :func:`run_night`."""

    def __init__(
        self,
        *,
        config: SleepConfig,
        project: Path,
        pool: ModelPool,
        run: RunDir,
        clock: Clock,
        progress: NightProgress,
        dry_run: bool,
        resumed: bool,
        observer: StageObserver = NO_OBSERVER,
    ) -> None:
        self.cfg = config
        self.observer = observer
        self.project = project
        self.spend = SpendingPool(
            pool, max_calls=config.budget.max_calls, max_tokens=config.budget.max_tokens
        )
        self.run = run
        self.clock = clock
        self.progress = progress
        self.dry_run = dry_run
        self.resumed = resumed
        self.gate = Gate(settings=config.gate)
        evidence = (
            functools.partial(
                run.append_evidence, max_chars=config.night.evidence_max_chars, sanitized=True
            )
            if config.night.evidence
            else None
        )
        self.replayer = Replayer(
            pool=self.spend,
            marker=SELF_MARKER,
            record=self._record_rollouts,
            evidence=evidence,
            progress=progress,
        )
        self.reflector = Reflector(
            pool=self.spend,
            marker=SELF_MARKER,
            preferences=config.night.preferences,
            score=self.gate.score,
            evidence=evidence,
            progress=progress,
        )
        self.trials: list[Trial] = []
        self.reflections: dict[str, ReflectOutcome] = {}
        self.notes: list[str] = []
        self.no_edit_reasons: list[str] = []
        self._rollouts_recorded = 0
        self._calls_at: dict[str, int] = {}
        self.stage = ""

    # -- small helpers ---------------------------------------------------------------

    def _record_rollouts(self, rows: list[dict[str, Any]]) -> None:
        self.run.append_rollouts(rows)
        self._rollouts_recorded += len(rows)
        self.observer.rollouts_recorded(self._rollouts_recorded)

    def begin(self, name: str) -> None:
        self.stage = name
        self.progress.stage(name)
        self._calls_at[name] = self.spend.calls
        self.run.begin_stage(name, self.clock())
        self.observer.stage_started(name)

    def end(self, name: str, **extra: Any) -> None:
        calls = self.spend.calls - self._calls_at.get(name, self.spend.calls)
        self.run.end_stage(name, self.clock(), model_calls=calls, **extra)
        self.observer.stage_ended(name)

    def jobs(
        self, tasks: Sequence[TaskRecord], docs: Docs, *, samples: int, phase: str, fresh: bool
    ) -> list[Job]:
        return [
            Job(task=t, docs=docs, sample_id=k, phase=phase, fresh=fresh)
            for t in tasks
            for k in range(samples)
        ]

    def check_budget(self, stage: str) -> None:
        if self.spend.exhausted:
            raise BudgetExceededError(stage)

    # -- stages ----------------------------------------------------------------------

    def check_degenerate(
        self, stage: str, results: Sequence[RolloutResult], *, candidate: bool = False
    ) -> None:
        """Fail the night on an outage. ``candidate``: results under a candidate document,
        whose empty answers may be the edit's own (bad) effect rather than an outage."""
        if not results:
            return
        errors = [r.error for r in results if r.error]
        if len(errors) == len(results):
            cause = Counter(errors).most_common(1)[0][0]
            if self.spend.exhausted:
                raise BudgetExceededError(stage)
            raise NightFailed(stage, f"every model call failed ({len(errors)} calls): {cause}")
        if not candidate and all(not r.response.strip() for r in results):
            raise NightFailed(stage, "every rollout came back empty")
        if errors and all(r.hard == 0 and r.soft == 0 for r in results):
            cause = Counter(errors).most_common(1)[0][0]
            raise NightFailed(
                stage, f"all scores are zero alongside {len(errors)} call errors: {cause}"
            )
        check_judging(stage, self.replayer.judging, limit=self.cfg.night.max_judge_failures)

    async def reflect(
        self, key: str, target: EditTarget, docs: Docs, sets: Sequence[RolloutSet]
    ) -> ReflectOutcome:
        saved = self.run.journal["checkpoint"].get(f"reflect.{key}")
        if saved is not None:
            outcome = ReflectOutcome.from_dict(saved)
        else:
            outcome = await self.reflector.reflect(
                target=target, docs=docs, sets=sets, budget=self.cfg.night.edit_budget
            )
            self.run.checkpoint(f"reflect.{key}", outcome.to_dict())
        self.reflections[key] = outcome
        if not outcome.edits and outcome.reason:
            self.no_edit_reasons.append(f"{key}: {outcome.reason}")
        return outcome

    def check_reflections(self, stage: str, outcomes: Sequence[ReflectOutcome]) -> None:
        """Fail the night when every reflection call of a stage failed (an outage)."""
        asked = [o for o in outcomes if o.calls]
        failed = [o for o in asked if not o.edits and o.errors and not o.raw]
        if asked and len(failed) == len(asked):
            self.check_budget(stage)
            calls = sum(o.calls for o in failed)
            errors = [e for o in failed for e in o.errors]
            # an open circuit is a consequence: name the failure that opened it
            root = next((e for e in errors if not e.startswith("NoHealthyMemberError")), errors[-1])
            raise NightFailed(stage, f"every reflection call failed ({calls}): {root}")

    async def measure(
        self, tasks: Sequence[TaskRecord], docs: Docs, phase: str, *, check: bool = True
    ) -> list[RolloutResult]:
        """Results under ``docs`` (gate samples, fresh); ``check``: fail on an outage."""
        samples = self.cfg.gate.samples_per_task
        results = await self.replayer.run(
            self.jobs(tasks, docs, samples=samples, phase=phase, fresh=True)
        )
        if check:
            self.check_degenerate(self.stage, results, candidate=True)
        return results


@dataclass(kw_only=True)
class Decision:
    accepted: bool
    action: str
    baseline: float
    candidate: float
    final: GateDecision | None
    docs: Docs
    applied: list[EditRecord]
    rejected: list[EditRecord]
    untested: list[Candidate] = field(default_factory=list)
    folds: dict[str, int] = field(default_factory=dict)  # task id -> fold (first round)
    nothing_to_learn: bool = False
    start_scores: dict[str, float] = field(default_factory=dict)  # per task, live documents


def _all_pass(measured: Measured) -> bool:
    return all(v >= 1.0 for values in measured.scores.values() for v in values)


def _settled(rolled: Measured) -> bool:
    """Every task's rollouts agree: the model answers deterministically, so a round that
    kept nothing would keep nothing again. A noisy model gets another round instead: its
    empty round may have missed by chance, and the next one is an independent try (fresh
    rollouts, re-dealt folds, a new reflection)."""
    return all(task_settled(values, values) for values in rolled.scores.values())


async def _rollouts(
    night: Night, stage: str, tasks: Sequence[TaskRecord], docs: Docs, first: int = 0
) -> Measured:
    """K samples of every learnable task under ``docs``: reflection material and baseline."""
    night.begin(stage)
    samples = max(night.cfg.night.dream_rollouts, night.cfg.gate.samples_per_task)
    measured = await measure(night, tasks, docs, samples=samples, phase="rollout", first=first)
    night.check_degenerate(stage, measured.results)
    night.end(stage, rollouts=len(measured.results))
    night.check_budget(stage)
    return measured


async def consolidate(
    night: Night,
    *,
    tasks: Sequence[TaskRecord],
    start: Docs,
    rotation: int,
    carried: Sequence[Candidate] = (),
) -> Decision:
    """Cross-fitted rounds over ``tasks``, then the final paired check against ``start``."""
    cfg = night.cfg
    if cfg.gate.mode == OFF:
        return await ungated(night, tasks, start)
    base = await _rollouts(night, "rollouts", tasks, start)
    baseline = base.mean()
    folds = make_folds(tasks, n_folds=cfg.night.folds, seed=cfg.night.seed, rotation=rotation)
    fold_of = {t.id: i for i, fold in enumerate(folds) for t in fold}
    rejected_all = Decision(
        accepted=False, action=GateAction.REJECT.value, baseline=baseline, candidate=baseline,
        final=None, docs=start, applied=[], rejected=[], folds=fold_of,
        start_scores=base.task_means(),
    )  # fmt: skip
    why = ""
    if _all_pass(base):
        why = (
            f"every one of the {len(tasks)} task(s) already passes under the live documents: "
            "nothing to learn tonight"
        )
    elif len(tasks) < 2:
        why = (
            "only one learnable task: nothing can be held out from its own reflection "
            "(cross-fitting needs at least two tasks), so no edit is proposed"
        )
    if why:
        night.no_edit_reasons.append(why)
        night.progress.note(why)
        rejected_all.nothing_to_learn = True
        return rejected_all
    best, measured = start, base
    round_start = start
    applied: list[EditRecord] = []
    proposed: list[EditRecord] = []
    untested: dict[EditRecord, Candidate] = {}
    targets = [t for t, on in ((EditTarget.SKILL, cfg.night.evolve_skill),
                               (EditTarget.MEMORY, cfg.night.evolve_memory)) if on]  # fmt: skip
    rolled = base  # the current round's rollouts
    for round_no in range(1, cfg.night.rounds + 1):
        if round_no > 1 and (_all_pass(measured) or (best == round_start and _settled(rolled))):
            why = "every task passes" if _all_pass(measured) else "nothing changed"
            night.notes.append(f"rounds {round_no}-{cfg.night.rounds} skipped: {why}")
            break
        round_start = best
        first_id = (round_no - 1) * ROUND  # each round draws samples of its own
        if round_no > 1:
            measured = rolled = await _rollouts(night, f"round{round_no}.rollouts", tasks, best,
                                                first_id)  # fmt: skip
            folds = make_folds(tasks, n_folds=cfg.night.folds, seed=cfg.night.seed,
                               rotation=rotation * 100 + round_no)  # fmt: skip
        for target in targets:
            if len(next(iter(measured.scores.values()), ())) < cfg.night.dream_rollouts:
                measured = await _rollouts(night, f"round{round_no}.rollouts_{target.value}",
                                           tasks, best, first_id)  # fmt: skip
            step = await learn_target(
                night, round_no=round_no, target=target, tasks=tasks, best=best,
                base=measured, folds=folds, carried=carried if round_no == 1 else (),
                first_id=first_id,
            )  # fmt: skip
            best, measured = step.best, step.measured
            applied.extend(step.accepted)
            proposed.extend(step.proposed)
            for cand in step.untested:
                untested.setdefault(cand.edit, cand)
    applied = list(dict.fromkeys(applied))
    rejected = [e for e in dict.fromkeys(proposed) if e not in applied and e not in untested]
    rejected_all.rejected = rejected
    rejected_all.untested = [c for e, c in untested.items() if e not in applied]
    if not applied:
        if untested and not rejected:
            rejected_all.action = GateAction.UNTESTED.value
        return rejected_all
    if cfg.gate.mode == GREEDY:
        return greedy_final(rejected_all, best, applied)
    return await _final(night, tasks, start, best, applied, rejected_all)


async def _final(
    night: Night,
    tasks: Sequence[TaskRecord],
    start: Docs,
    best: Docs,
    applied: list[EditRecord],
    decision: Decision,
) -> Decision:
    """The best documents against the live ones on every task, paired (no extra calls for
    samples both arms already have); every accepted edit must have been leak-free."""
    night.begin("final")
    b, c = await compare(
        night, tasks, start, best, phase="final", plan=clear_pass(night), offset=FRESH
    )
    night.check_degenerate("final", c.results, candidate=True)
    final = decide_paired(b.scores, c.scores, config=night.gate.config,
                          task_ids=[t.id for t in tasks])  # fmt: skip
    leaks = [
        e.content[:80] for t in night.trials if t.kind == "single" and t.decision
        and t.decision.accepted and t.decision.leaked for e in t.edits
    ]  # fmt: skip
    if leaks and final.accepted:
        final = replace(final, action=GateAction.REJECT_UNVERIFIED, accepted=False, leaked=True)
    final.arithmetic["per_edit_leak_check"] = {"edits": len(applied), "leaked": leaks}
    night.trials.append(
        Trial(name="final", kind="final", round=night.cfg.night.rounds, target="both",
              edits=applied, applied=applied, unmatched=[], decision=final,
              note="the night's best documents against the live ones, paired per task and sample")
    )  # fmt: skip
    night.end("final", accepted=final.accepted)
    decision.final = final
    decision.action = final.action.value
    decision.baseline, decision.candidate = final.baseline, final.candidate
    if final.accepted:
        decision.accepted, decision.docs, decision.applied = True, best, applied
    else:
        decision.rejected = list(dict.fromkeys([*decision.rejected, *applied]))
    return decision
