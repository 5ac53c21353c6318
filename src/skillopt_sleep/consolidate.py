"""The learning part of a night: rollouts -> reflect -> gate trials -> attribution -> final.

:class:`Night` holds one running night (run directory, spend-capped pool, replayer,
reflector, gate) and its stage helpers; :func:`consolidate` drives the rounds and the final
fresh check and returns a :class:`Decision`. Every stage is journalled in ``run.json``.
"""

from __future__ import annotations

import functools
import os
import signal
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

from skillopt.errors import BudgetExceededError
from skillopt.skilldoc import EditMode, apply_edits
from skillopt.types import (
    EditRecord,
    EditTarget,
    GateAction,
    GateDecision,
    RolloutResult,
    Split,
    TaskRecord,
)
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.gating import Gate
from skillopt_sleep.harvest import SELF_MARKER
from skillopt_sleep.judging import check_judging
from skillopt_sleep.outcome import NightFailed
from skillopt_sleep.progress import NightProgress
from skillopt_sleep.reflect import Reflector, ReflectOutcome, RolloutSet
from skillopt_sleep.replay import Docs, Job, Replayer
from skillopt_sleep.rundir import RunDir
from skillopt_sleep.spend import ModelPool, SpendEstimate, SpendingPool

Clock = Callable[[], datetime]


@dataclass(kw_only=True)
class Trial:
    """One gate trial: a candidate (skill, memory) measured on val against a reference."""

    name: str
    kind: str  # trial | attribution_single | attribution_union | final
    round: int
    target: str
    edits: list[EditRecord]
    applied: list[EditRecord]
    unmatched: list[EditRecord]
    decision: GateDecision | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "round": self.round,
            "target": self.target,
            "edits": [e.to_dict() for e in self.edits],
            "applied": [e.to_dict() for e in self.applied],
            "unmatched": [e.to_dict() for e in self.unmatched],
            "decision": self.decision.to_dict() if self.decision else None,
            "note": self.note,
        }


def _apply(docs: Docs, edits: Sequence[EditRecord], target: EditTarget) -> tuple[Docs, Any]:
    text = docs.skill if target is EditTarget.SKILL else docs.memory
    app = apply_edits(text, edits, mode=EditMode.LEARNED)
    new = (
        Docs(skill=app.text, memory=docs.memory)
        if target is EditTarget.SKILL
        else Docs(skill=docs.skill, memory=app.text)
    )
    return new, app


def estimate_spend(
    *, n_train: int, n_val: int, n_test: int, cfg: SleepConfig, rubric_share: float
) -> SpendEstimate:
    """A rough upper estimate of the night's calls, printed before any spend."""
    night, gate = cfg.night, cfg.gate
    judge = 1.0 + rubric_share
    targets = int(night.evolve_skill) + int(night.evolve_memory)
    val_pass = n_val * gate.samples_per_task
    by_stage = {
        "baseline": int(val_pass * judge),
        "rollouts": int(n_train * night.dream_rollouts * judge * night.rounds * targets),
        "reflect": 2 * targets * night.rounds,
        "trials": int(val_pass * judge * targets * night.rounds),
        "attribution": int(val_pass * judge * (night.edit_budget + 1) * night.rounds)
        if night.attribution
        else 0,
        "final": int(val_pass * judge),
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
    ) -> None:
        self.cfg = config
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
        kill = self.cfg.debug_kill_after
        if kill.startswith("rollouts=") and self._rollouts_recorded >= int(kill.split("=")[1]):
            os.kill(os.getpid(), signal.SIGKILL)

    def begin(self, name: str) -> None:
        self.stage = name
        self.progress.stage(name)
        self._calls_at[name] = self.spend.calls
        self.run.begin_stage(name, self.clock())

    def end(self, name: str, **extra: Any) -> None:
        calls = self.spend.calls - self._calls_at.get(name, self.spend.calls)
        self.run.end_stage(name, self.clock(), model_calls=calls, **extra)
        kill = self.cfg.debug_kill_after
        if kill == name:
            os.kill(os.getpid(), signal.SIGKILL)
        elif kill == f"sigint:{name}":
            os.kill(os.getpid(), signal.SIGINT)

    def jobs(
        self, tasks: Sequence[TaskRecord], docs: Docs, *, samples: int, phase: str, fresh: bool
    ) -> list[Job]:
        return [
            Job(task=t, docs=docs, sample_id=k, phase=phase, fresh=fresh)
            for t in tasks
            for k in range(samples)
        ]

    def _check_budget(self, stage: str) -> None:
        if self.spend.exhausted:
            raise BudgetExceededError(stage)

    # -- stages ----------------------------------------------------------------------

    async def baseline_and_rollouts(
        self, train: Sequence[TaskRecord], val: Sequence[TaskRecord], docs: Docs
    ) -> tuple[list[RolloutResult], list[RolloutResult]]:
        """Val baseline and K train rollouts, all in one concurrent wave."""
        name = "rollouts"
        self.begin(name)
        samples = self.cfg.gate.samples_per_task
        k = self.cfg.night.dream_rollouts
        val_jobs = self.jobs(val, docs, samples=samples, phase="baseline", fresh=False)
        train_jobs = self.jobs(train, docs, samples=k, phase="rollout", fresh=False)
        results = await self.replayer.run([*val_jobs, *train_jobs])
        base, rolls = results[: len(val_jobs)], results[len(val_jobs) :]
        self._check_degenerate(name, results)
        self.end(name, rollouts=len(results))
        self._check_budget(name)
        return base, rolls

    def _check_degenerate(
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
        if not outcome.edits and outcome.errors and not outcome.raw:
            self._check_budget(self.stage)
            raise NightFailed(
                self.stage, f"every reflection call failed ({outcome.calls}): {outcome.errors[-1]}"
            )
        return outcome

    async def measure(
        self, tasks: Sequence[TaskRecord], docs: Docs, phase: str, *, check: bool = True
    ) -> list[RolloutResult]:
        """Val results under candidate ``docs``; ``check``: fail the night on an outage."""
        samples = self.cfg.gate.samples_per_task
        results = await self.replayer.run(
            self.jobs(tasks, docs, samples=samples, phase=phase, fresh=False)
        )
        if check:
            self._check_degenerate(self.stage, results, candidate=True)
        return results

    async def trial(
        self,
        *,
        round_no: int,
        target: EditTarget,
        edits: Sequence[EditRecord],
        best: Docs,
        best_val: list[RolloutResult],
        val: Sequence[TaskRecord],
    ) -> tuple[Docs, list[RolloutResult], list[EditRecord]]:
        """Gate ``edits`` against the best candidate so far; attribute when rejected.

        Returns the (possibly improved) best docs, their val results, and accepted edits.
        """
        name = f"round{round_no}.trial_{target.value}"
        self.begin(name)
        cand, app = _apply(best, edits, target)
        record = Trial(
            name=name,
            kind="trial",
            round=round_no,
            target=target.value,
            edits=list(edits),
            applied=list(app.applied),
            unmatched=[*app.unmatched, *app.skipped],
        )
        self.trials.append(record)
        if not app.applied:
            record.note = "no edit changed the document"
            self.no_edit_reasons.append(f"{name}: every proposed edit was unmatched")
            self.end(name)
            return best, best_val, []
        cand_val = await self.measure(val, cand, "trial")
        record.decision = self.gate.decide(best_val, cand_val)
        if record.decision.accepted:
            self.end(name, accepted=True)
            return cand, cand_val, list(app.applied)
        self.end(name, accepted=False)
        self._check_budget(name)
        if len(app.applied) > 1 and self.cfg.night.attribution:
            return await self.attribute(
                round_no=round_no,
                target=target,
                applied=list(app.applied),
                best=best,
                best_val=best_val,
                val=val,
            )
        return best, best_val, []

    async def attribute(
        self,
        *,
        round_no: int,
        target: EditTarget,
        applied: list[EditRecord],
        best: Docs,
        best_val: list[RolloutResult],
        val: Sequence[TaskRecord],
    ) -> tuple[Docs, list[RolloutResult], list[EditRecord]]:
        """Each edit alone (concurrently), then the union of the helpful ones, gated."""
        name = f"round{round_no}.attribution_{target.value}"
        self.begin(name)
        singles = [_apply(best, [e], target) for e in applied]
        results: list[list[RolloutResult]] = [[] for _ in singles]

        async def one(i: int) -> None:
            results[i] = await self.measure(val, singles[i][0], "attribution", check=False)

        async with anyio.create_task_group() as tg:
            for i in range(len(singles)):
                tg.start_soon(one, i)
        # checked here, outside the task group, so a failure is not wrapped in a group
        self._check_degenerate(name, [r for res in results for r in res], candidate=True)
        base_score = self.gate.mean(best_val)
        helpful: list[EditRecord] = []
        for edit, (_, app), res in zip(applied, singles, results, strict=True):
            decision = self.gate.decide(best_val, res)
            self.trials.append(
                Trial(
                    name=f"{name}.single",
                    kind="attribution_single",
                    round=round_no,
                    target=target.value,
                    edits=[edit],
                    applied=list(app.applied),
                    unmatched=list(app.unmatched),
                    decision=decision,
                )
            )
            if (
                app.applied
                and self.gate.mean(res) > base_score
                and not decision.blocked_by_regression
            ):
                helpful.append(edit)
        if not helpful:
            self.notes.append(f"{name}: no single edit helped on its own")
            self.end(name, helpful=0)
            return best, best_val, []
        if len(helpful) == 1:
            idx = applied.index(helpful[0])
            single = self.trials[-len(applied) + idx]
            self.end(name, helpful=1)
            if single.decision is not None and single.decision.accepted:
                return singles[idx][0], results[idx], helpful
            return best, best_val, []
        union, app = _apply(best, helpful, target)
        union_val = await self.measure(val, union, "attribution")
        decision = self.gate.decide(best_val, union_val)
        self.trials.append(
            Trial(
                name=f"{name}.union",
                kind="attribution_union",
                round=round_no,
                target=target.value,
                edits=helpful,
                applied=list(app.applied),
                unmatched=list(app.unmatched),
                decision=decision,
            )
        )
        self.end(name, helpful=len(helpful), accepted=decision.accepted)
        if decision.accepted:
            return union, union_val, list(app.applied)
        return best, best_val, []


def _rollout_sets(
    tasks: Sequence[TaskRecord], results: Sequence[RolloutResult]
) -> list[RolloutSet]:
    by_task: dict[str, list[RolloutResult]] = {}
    for r in results:
        by_task.setdefault(r.task_id, []).append(r)
    return [RolloutSet(task=t, results=tuple(by_task.get(t.id, ()))) for t in tasks]


async def _train_rollouts(
    night: Night, stage: str, train: Sequence[TaskRecord], docs: Docs
) -> tuple[list[RolloutResult], Docs]:
    """K fresh dream rollouts per train task under ``docs``, as one named stage."""
    night.begin(stage)
    samples = night.cfg.night.dream_rollouts
    rolls = await night.replayer.run(
        night.jobs(train, docs, samples=samples, phase="rollout", fresh=False)
    )
    night._check_degenerate(stage, rolls)
    night.end(stage)
    return rolls, docs


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


async def consolidate(
    night: Night,
    *,
    train: list[TaskRecord],
    val: list[TaskRecord],
    start: Docs,
) -> Decision:
    """Rounds of rollouts -> reflect -> trials, then the final fresh check."""
    cfg = night.cfg
    base_val, rolls = await night.baseline_and_rollouts(train, val, start)
    best, best_val = start, base_val
    rolls_docs = start
    applied: list[EditRecord] = []
    proposed: list[EditRecord] = []
    for round_no in range(1, cfg.night.rounds + 1):
        if round_no > 1:
            stage = f"round{round_no}.rollouts"
            rolls, rolls_docs = await _train_rollouts(night, stage, train, best)
        for target in (EditTarget.SKILL, EditTarget.MEMORY):
            if not (
                cfg.night.evolve_skill if target is EditTarget.SKILL else cfg.night.evolve_memory
            ):
                continue
            if target is EditTarget.MEMORY and best != rolls_docs:
                # Memory reflects on rollouts under the current best skill (hill-climbing).
                rolls, rolls_docs = await _train_rollouts(
                    night, f"round{round_no}.rollouts_post_skill", train, best
                )
            name = f"round{round_no}.reflect_{target.value}"
            night.begin(name)
            outcome = await night.reflect(
                f"r{round_no}.{target.value}", target, best, _rollout_sets(train, rolls)
            )
            night.end(name, edits=len(outcome.edits), mode=outcome.mode.value)
            night._check_budget(name)
            if not outcome.edits:
                continue
            proposed.extend(outcome.edits)
            best, best_val, won = await night.trial(
                round_no=round_no,
                target=target,
                edits=outcome.edits,
                best=best,
                best_val=best_val,
                val=val,
            )
            applied.extend(won)
    baseline_score = night.gate.mean(base_val)
    proposed = list(dict.fromkeys(proposed))
    rejected = [e for e in proposed if e not in applied]
    if not applied:
        return Decision(
            accepted=False,
            action=GateAction.REJECT.value,
            baseline=baseline_score,
            candidate=baseline_score,
            final=None,
            docs=start,
            applied=[],
            rejected=rejected,
        )
    night.begin("final")
    final_val = await night.replayer.run(
        night.jobs(val, best, samples=cfg.gate.samples_per_task, phase="final", fresh=True)
    )
    night._check_degenerate("final", final_val)
    decision = night.gate.decide(base_val, final_val, final=True)
    night.trials.append(
        Trial(
            name="final",
            kind="final",
            round=cfg.night.rounds,
            target="both",
            edits=applied,
            applied=applied,
            unmatched=[],
            decision=decision,
            note="fresh samples (cache bypassed) against the original baseline",
        )
    )
    night.end("final", accepted=decision.accepted)
    if not decision.accepted:
        rejected = proposed
    return Decision(
        accepted=decision.accepted,
        action=decision.action.value,
        baseline=decision.baseline,
        candidate=decision.candidate,
        final=decision,
        docs=best if decision.accepted else start,
        applied=applied if decision.accepted else [],
        rejected=rejected,
    )


def split_tasks(
    tasks: Sequence[TaskRecord],
) -> tuple[list[TaskRecord], list[TaskRecord], list[TaskRecord], bool]:
    """(train, val, test, leaked). An empty train or val borrows the other and leaks."""
    train = [t for t in tasks if t.split is Split.TRAIN]
    val = [t for t in tasks if t.split is Split.VAL]
    test = [t for t in tasks if t.split is Split.TEST]
    leaked = False
    if not val and train:
        val, leaked = list(train), True
    elif not train and val:
        train, leaked = list(val), True
    if {t.id for t in train} & {t.id for t in val}:
        leaked = True
    return train, val, test, leaked
