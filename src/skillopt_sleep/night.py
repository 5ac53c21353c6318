"""One night, end to end, as an async pipeline of checkpointed stages.

::

    harvest+mine+split -> [val baseline | train rollouts x K] (concurrent, judged as they land)
      -> for each round: reflect(skill) -> trial -> [attribution] -> rollouts -> reflect(memory)
         -> trial (hill-climbing: each trial is measured against the best candidate so far)
      -> final FRESH replay on val vs the original baseline (core gate) -> test split
      -> stage (report, proposal, versions) -> [auto-adopt] -> save state

Resume: every judged rollout is appended to ``rollouts.jsonl`` and every reflect result is
checkpointed in ``run.json``. A killed night is re-run by the next ``once`` with the same
tasks; work already done is replayed from the checkpoints without a model call, so it
reaches the same decision. A night that cannot be resumed is marked ``aborted``.

The live skill and memory files are only read here; staging writes a proposal, and adopt
is a separate explicit step (unless ``auto_adopt``).
"""

from __future__ import annotations

import functools
import os
import signal
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import anyio

from skillopt.errors import BudgetExceededError, ConfigError, SkillOptError
from skillopt.logging import get_logger
from skillopt.skilldoc import EditMode, apply_edits, content_hash
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
from skillopt_sleep.progress import LogProgress, NightProgress
from skillopt_sleep.reflect import Reflector, ReflectOutcome, RolloutSet
from skillopt_sleep.replay import Docs, Job, Replayer
from skillopt_sleep.rundir import RunDir, RunStatus, utc_now
from skillopt_sleep.spend import ModelPool, SpendEstimate, SpendingPool
from skillopt_sleep.state import project_dir


def _log() -> Any:
    """Looked up per call, so the logging config set by the CLI applies."""
    return get_logger("skillopt_sleep.night")


Clock = Callable[[], datetime]


class NightResult(StrEnum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    NO_TASKS = "no_tasks"
    NO_EDITS = "no_edits"
    BUDGET_REACHED = "budget_reached"
    FAILED = "failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class NightOutcome:
    """What a night produced; ``exit_code`` is what the CLI returns."""

    status: RunStatus
    result: NightResult
    run_id: str = ""
    run_dir: Path | None = None
    report_path: Path | None = None
    proposal_dir: Path | None = None
    accepted: bool = False
    gate_action: str = ""
    baseline: float | None = None
    candidate: float | None = None
    test_score: float | None = None
    n_sessions: int = 0
    n_tasks: int = 0
    reason: str = ""
    failed_stage: str = ""
    resumed: bool = False
    dry_run: bool = False
    spend: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return 1 if self.status in (RunStatus.FAILED, RunStatus.ABORTED) else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.exit_code == 0,
            "status": self.status.value,
            "result": self.result.value,
            "run_id": self.run_id,
            "run_dir": str(self.run_dir) if self.run_dir else None,
            "report": str(self.report_path) if self.report_path else None,
            "proposal": str(self.proposal_dir) if self.proposal_dir else None,
            "accepted": self.accepted,
            "gate_action": self.gate_action,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "test_score": self.test_score,
            "n_sessions": self.n_sessions,
            "n_tasks": self.n_tasks,
            "reason": self.reason,
            "failed_stage": self.failed_stage,
            "resumed": self.resumed,
            "dry_run": self.dry_run,
            "spend": self.spend,
        }


class NightFailed(SkillOptError):
    """A night that cannot produce a trustworthy result; names the stage and the cause."""

    def __init__(self, stage: str, cause: str) -> None:
        self.stage = stage
        self.cause = cause
        super().__init__(f"{stage}: {cause}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Live:
    """The live documents as read at the start of the night (never written here)."""

    skill_path: Path
    memory_path: Path
    skill: str
    memory: str
    skill_sha: str  # "" = file absent
    memory_sha: str


def read_live(path: Path) -> tuple[str, str]:
    """(text, sha256 of the bytes); a missing file is ("", "")."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return "", ""
    except OSError as exc:
        raise ConfigError(f"cannot read live document: {exc.strerror}", source=str(path)) from exc
    try:
        return raw.decode("utf-8"), content_hash(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError("live document is not UTF-8", source=str(path)) from exc


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
        )
        self.trials: list[Trial] = []
        self.reflections: dict[str, ReflectOutcome] = {}
        self.notes: list[str] = []
        self.no_edit_reasons: list[str] = []
        self._rollouts_recorded = 0
        self._calls_at: dict[str, int] = {}

    # -- small helpers ---------------------------------------------------------------

    def _record_rollouts(self, rows: list[dict[str, Any]]) -> None:
        self.run.append_rollouts(rows)
        self._rollouts_recorded += len(rows)
        kill = self.cfg.debug_kill_after
        if kill.startswith("rollouts=") and self._rollouts_recorded >= int(kill.split("=")[1]):
            os.kill(os.getpid(), signal.SIGKILL)

    def begin(self, name: str) -> None:
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

    def _check_degenerate(self, stage: str, results: Sequence[RolloutResult]) -> None:
        if not results:
            return
        errors = [r.error for r in results if r.error]
        if len(errors) == len(results):
            cause = Counter(errors).most_common(1)[0][0]
            if self.spend.exhausted:
                raise BudgetExceededError(stage)
            raise NightFailed(stage, f"every model call failed ({len(errors)} calls): {cause}")
        if all(not r.response.strip() for r in results):
            raise NightFailed(stage, "every rollout came back empty")
        if errors and all(r.hard == 0 and r.soft == 0 for r in results):
            cause = Counter(errors).most_common(1)[0][0]
            raise NightFailed(
                stage, f"all scores are zero alongside {len(errors)} call errors: {cause}"
            )

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

    async def measure(
        self, tasks: Sequence[TaskRecord], docs: Docs, phase: str
    ) -> list[RolloutResult]:
        samples = self.cfg.gate.samples_per_task
        return await self.replayer.run(
            self.jobs(tasks, docs, samples=samples, phase=phase, fresh=False)
        )

    async def trial(
        self,
        *,
        round_no: int,
        target: EditTarget,
        edits: Sequence[EditRecord],
        best: Docs,
        best_val: list[RolloutResult],
        val: Sequence[TaskRecord],
        leaked: bool,
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
            results[i] = await self.measure(val, singles[i][0], "attribution")

        async with anyio.create_task_group() as tg:
            for i in range(len(singles)):
                tg.start_soon(one, i)
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
    leaked: bool,
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
            name = f"round{round_no}.rollouts"
            night.begin(name)
            rolls = await night.replayer.run(
                night.jobs(
                    train, best, samples=cfg.night.dream_rollouts, phase="rollout", fresh=False
                )
            )
            rolls_docs = best
            night.end(name)
        for target in (EditTarget.SKILL, EditTarget.MEMORY):
            if not (
                cfg.night.evolve_skill if target is EditTarget.SKILL else cfg.night.evolve_memory
            ):
                continue
            if target is EditTarget.MEMORY and best != rolls_docs:
                # Memory reflects on rollouts under the current best skill (hill-climbing).
                name = f"round{round_no}.rollouts_post_skill"
                night.begin(name)
                rolls = await night.replayer.run(
                    night.jobs(
                        train, best, samples=cfg.night.dream_rollouts, phase="rollout", fresh=False
                    )
                )
                rolls_docs = best
                night.end(name)
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
                leaked=leaked,
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


def resolve_project(project: Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(project)))


def now_clock() -> datetime:
    return utc_now()


def runs_dir(cfg: SleepConfig, project: Path) -> Path:
    return project_dir(cfg.state_path(), project) / "runs"


# --------------------------------------------------------------------------- entry point


def _find_resumable(
    root: Path, cfg: SleepConfig, *, dry_run: bool, now: datetime
) -> tuple[RunDir | None, list[str]]:
    """The last run if it was killed mid-night and can be resumed; abort it otherwise.

    The caller holds the project lock, so a run still marked ``running`` is dead.
    """
    notes: list[str] = []
    runs = RunDir.list_runs(root)
    if not runs:
        return None, notes
    try:
        last = RunDir.open(runs[-1])
    except SkillOptError as exc:
        notes.append(f"ignored an unreadable earlier run: {exc}")
        return None, notes
    interrupted = last.status is RunStatus.ABORTED and last.journal.get("resumable")
    if last.status is not RunStatus.RUNNING and not interrupted:
        return None, notes
    reason = ""
    if last.journal.get("dry_run") != dry_run:
        reason = "interrupted; the next night was a different kind (dry run vs real)"
    elif last.journal.get("config_hash") != cfg.fingerprint():
        reason = "interrupted; the configuration changed before it could be resumed"
    elif not last.stage_done("harvest"):
        reason = "interrupted before its tasks were saved; a new night starts from scratch"
    if reason:
        last.journal["resumable"] = False
        last.finish(RunStatus.ABORTED, now, outcome="aborted", reason=reason)
        notes.append(f"earlier run {last.run_id} marked aborted: {reason}")
        return None, notes
    return last, notes


async def run_night(
    config: SleepConfig,
    *,
    project: Path,
    dry_run: bool = False,
    demo: bool = False,
    pool: ModelPool | None = None,
    clock: Clock | None = None,
    progress: NightProgress | None = None,
    tasks_file: Path | None = None,
) -> NightOutcome:
    """Run (or resume) one night for ``project``. The caller holds the project lock.

    ``pool`` defaults to one built from ``config.pool`` (closed afterwards); ``demo`` only
    labels the report. Failures of the night become a ``failed`` outcome (exit 1), never
    an exception; configuration problems raise :class:`ConfigError`.
    """
    from skillopt_sleep.pipeline import drive

    clock = clock or now_clock
    progress = progress or LogProgress()
    project = resolve_project(project)
    root = runs_dir(config, project)
    started = clock()
    run, notes = _find_resumable(root, config, dry_run=dry_run, now=started)
    resumed = run is not None
    if run is None:
        run = RunDir.create(
            root,
            now=started,
            project=str(project),
            project_key=root.parent.name,
            config=config.snapshot(),
            config_hash=config.fingerprint(),
            dry_run=dry_run,
        )
    else:
        run.mark_resumed(started, pid=os.getpid())
        notes.append(f"resumed run {run.run_id} from its last complete stage")
    run.journal["demo"] = demo
    owned = None
    if pool is None:
        if config.pool is None:
            raise ConfigError(
                "no model endpoints configured: add a [pool] section to the sleep config "
                "(see configs/sleep.example.toml), or try `skillopt-sleep once --demo`",
                key="pool",
            )
        from skillopt.backends.pool import BackendPool

        owned = BackendPool.from_config(config.pool)
        pool = owned
    night = Night(
        config=config,
        project=project,
        pool=pool,
        run=run,
        clock=clock,
        progress=progress,
        dry_run=dry_run,
        resumed=resumed,
    )
    night.notes.extend(notes)
    try:
        return await drive(night, tasks_file=tasks_file, demo=demo)
    finally:
        progress.close()
        if owned is not None:
            await owned.aclose()
