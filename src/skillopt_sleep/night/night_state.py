"""The running night: :class:`Night`, its state and the bookkeeping every stage shares.

One night, as this object sees it:

1. :func:`.entry.run_night` builds it over the run directory, the stack (wrapped here in the
   night's spend cap), the replayer and the reflector.
2. Each stage calls :meth:`Night.begin`, does its work through :meth:`Night.measure` and
   :meth:`Night.reflect` (a reflection is checkpointed in ``run.json`` and read back on
   resume), checks for an outage (:meth:`Night.check_degenerate`,
   :meth:`Night.check_reflections`) and the budget, then calls :meth:`Night.end`, which
   journals the stage with the model calls it made.
3. What the stages learned accumulates in ``trials``, ``reflections``, ``notes`` and
   ``no_edit_reasons``; the report reads them at the end.

Only the public attributes and methods are for other modules.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from skillopt.backends.base import Pool
from skillopt.backends.handoff import pending_failures
from skillopt.backends.wrappers import BudgetCompleter
from skillopt.errors import BudgetExceededError, RunFailedError, WaitingForAnswersError
from skillopt.gate import GateConfig, task_scores
from skillopt.progress import Progress
from skillopt.types import EditTarget, RolloutResult, TaskRecord
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.harvest import SELF_MARKER
from skillopt_sleep.line_watch import WatchedLine
from skillopt_sleep.night.learn.judging import check_judging
from skillopt_sleep.night.learn.trials import Trial
from skillopt_sleep.observer import NO_OBSERVER, StageObserver
from skillopt_sleep.reflect import Reflector, ReflectOutcome, RolloutSet
from skillopt_sleep.replay import JUDGE_ERROR, Docs, Job, Replayer
from skillopt_sleep.rundir import Clock, RunDir
from skillopt_sleep.tasks.archive import TaskArchive

__all__ = ["MAX_ERROR_SHARE", "Night"]

# A stage whose rollouts failed beyond this share is an outage; below it, the night goes on
# without the failed ones (a call lost after its retries, a task an endpoint always refuses).
MAX_ERROR_SHARE = 0.5


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


class Night:
    """The state of one night while it runs. Use :func:`.entry.run_night`."""

    def __init__(
        self,
        *,
        config: SleepConfig,
        project: Path,
        pool: Pool,
        run: RunDir,
        clock: Clock,
        progress: Progress,
        dry_run: bool,
        resumed: bool,
        observer: StageObserver = NO_OBSERVER,
        foreground: bool = False,
    ) -> None:
        self.cfg = config
        self.observer = observer
        self.foreground = foreground  # started from a terminal: see run_night
        self.project = project
        self.spend = BudgetCompleter(
            pool, max_calls=config.budget.max_calls, max_tokens=config.budget.max_tokens
        )
        self.run = run
        self.clock = clock
        self.progress = progress
        self.dry_run = dry_run
        self.resumed = resumed
        self.gate: GateConfig = config.gate
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
            score=self.score,
            evidence=evidence,
            progress=progress,
        )
        self.trials: list[Trial] = []
        self.reflections: dict[str, ReflectOutcome] = {}
        self.notes: list[str] = []
        self.no_edit_reasons: list[str] = []
        self.lost_tasks: set[str] = set()  # tasks none of whose calls answered (named once)
        # what the spend model learns from: share of tasks whose first rollouts disagreed,
        # sessions mined tonight, and the mining calls estimated before mining
        self.noise_seen: float | None = None
        self.sessions_mined = 0
        self.mining_estimate: int | None = None
        self.on_first_rollouts: Callable[[float], None] | None = None  # hears noise_seen
        # what tonight's noise probe found (:mod:`.quiet.probe`): True, every probed pair agreed
        # (rollouts draw one sample per task); False, answers disagree; None, not probed
        self.consistent_tonight: bool | None = None
        # the estimate says the budget will cut the night short: spend it by plan
        # (:mod:`.learn.budget_plan`)
        self.tight_budget = False
        # rules singles found significantly worse tonight (crossfit.harm_key -> the trials):
        # found so twice and proposed again, they are rejected without a test
        self.harmful_edits: dict[tuple[str, str, str], list[str]] = {}
        # the project's watched adopted lines, read once a night (.watched)
        self.watched: list[WatchedLine] | None = None
        self._rollouts_recorded = 0
        self._calls_at: dict[str, int] = {}
        self._hits_at: dict[str, int] = {}
        self.stage = ""
        # the project's task archive while the night runs (set by the driver; None in a
        # bare Night): what earlier nights recorded, e.g. each task's noise (see .quiet)
        self.archive: TaskArchive | None = None

    # -- gate scores -----------------------------------------------------------------

    def score(self, result: RolloutResult) -> float:
        """One rollout's gate score (a failed call scores 0)."""
        return 0.0 if result.error else self.gate.score(result.hard, result.soft)

    def mean_score(self, results: Sequence[RolloutResult]) -> float:
        """The mean over tasks of each task's mean gate score (tasks with no usable
        sample left out; 0 when none has one)."""
        per = [v for v in task_scores(results, config=self.gate).values() if v == v]
        return sum(per) / len(per) if per else 0.0

    # -- small helpers ---------------------------------------------------------------

    def _record_rollouts(self, rows: list[dict[str, Any]]) -> None:
        self.run.append_rollouts(rows)
        self._rollouts_recorded += len(rows)
        self.observer.rollouts_recorded(self._rollouts_recorded)

    def begin(self, name: str) -> None:
        self.stage = name
        self.progress.stage(name)
        self._calls_at[name] = self.spend.calls
        self._hits_at[name] = self.spend.cache_hits
        self.run.begin_stage(name, self.clock())
        self.observer.stage_started(name)

    def end(self, name: str, **extra: Any) -> None:
        self.check_waiting(name)
        calls = self.spend.calls - self._calls_at.get(name, self.spend.calls)
        hits = self.spend.cache_hits - self._hits_at.get(name, self.spend.cache_hits)
        self.run.end_stage(name, self.clock(), model_calls=calls, cache_hits=hits, **extra)
        self.observer.stage_ended(name)

    def jobs(
        self, tasks: Sequence[TaskRecord], docs: Docs, *, samples: int, phase: str, fresh: bool
    ) -> list[Job]:
        return [
            Job(task=t, docs=docs, sample_id=k, phase=phase, fresh=fresh)
            for t in tasks
            for k in range(samples)
        ]

    def waiting(self) -> int:
        """Calls that found no answer in handoff mode (0 with a model, without reading the
        pool's accounting: the gate asks before every sampling wave)."""
        pool = self.cfg.pool
        if pool is None or not pool.handoff:
            return 0
        return pending_failures(self.spend.accounting())

    def check_waiting(self, stage: str) -> None:
        """Handoff mode: once a stage has asked every call it could, stop the night if any
        of them waits for an answer (nothing decided from a missing reply is kept)."""
        if pending := self.waiting():
            raise WaitingForAnswersError(stage, pending)

    def check_budget(self, stage: str) -> None:
        if self.spend.exhausted:
            raise self.budget_stop(stage)

    def budget_stop(self, stage: str) -> BudgetExceededError:
        """The error that ends a stage the budget cut short (saying which cap)."""
        return BudgetExceededError(self.spend.stopped() or f"budget reached during {stage}")

    # -- stages ----------------------------------------------------------------------

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
        if errors and self.spend.exhausted:
            raise self.budget_stop(stage)
        if len(errors) > MAX_ERROR_SHARE * len(results):
            cause = Counter(r.error for r in errors).most_common(1)[0][0]
            what = _failure_share(results, errors)
            lost = _lost_tasks(results)
            named = f"; no answer at all for {_names(lost)}" if lost and len(errors) < len(
                results) else ""  # fmt: skip
            raise RunFailedError(stage, f"{what}: {cause}{named}")
        if not candidate and all(not r.response.strip() for r in results):
            raise RunFailedError(stage, "every rollout came back empty")
        intents = {t.id: t.intent for t in tasks}
        for task, cause in _lost_tasks(results).items():
            if task in self.lost_tasks:
                continue
            self.lost_tasks.add(task)
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
            self.notes.append(note)
            self.progress.note(note)
        check_judging(stage, self.replayer.judging, limit=self.cfg.night.max_judge_failures)

    async def reflect(
        self, key: str, target: EditTarget, docs: Docs, sets: Sequence[RolloutSet]
    ) -> ReflectOutcome:
        saved = self.run.journal.checkpoint.get(f"reflect.{key}")
        if saved is not None:
            outcome = ReflectOutcome.from_dict(saved)
        else:
            outcome = await self.reflector.reflect(
                target=target, docs=docs, sets=sets, budget=self.cfg.night.edit_budget
            )
            if not self.waiting():  # a reflection missing a reply is asked again
                self.run.checkpoint(f"reflect.{key}", outcome.to_dict())
        self.reflections[key] = outcome
        if not outcome.edits and outcome.reason:
            self.no_edit_reasons.append(f"{key}: {outcome.reason}")
        return outcome

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
