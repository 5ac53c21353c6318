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
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from skillopt.backends.base import Pool
from skillopt.backends.wrappers import BudgetCompleter
from skillopt.errors import BudgetExceededError
from skillopt.gate import GateConfig
from skillopt.progress import Progress
from skillopt.types import EditTarget, RolloutResult, TaskRecord
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.harvest import SELF_MARKER
from skillopt_sleep.line_watch import WatchedLine
from skillopt_sleep.night.learn.measure import (
    MAX_ERROR_SHARE,
    Budget,
    Draw,
    Findings,
    LearnSettings,
    Measure,
    Noise,
)
from skillopt_sleep.night.learn.samples import Measured
from skillopt_sleep.night.learn.trials import Trial
from skillopt_sleep.night.live import check_unchanged
from skillopt_sleep.night.outcome import Live
from skillopt_sleep.observer import NO_OBSERVER, StageObserver
from skillopt_sleep.reflect import Reflector, ReflectOutcome, RolloutSet
from skillopt_sleep.replay import Docs, Job, Replayer
from skillopt_sleep.rundir import Clock, RunDir
from skillopt_sleep.tasks.archive import TaskArchive

Probe = Callable[["Night", Sequence[TaskRecord], Docs, int], Awaitable[Measured]]
"""``probe(night, tasks, docs, first)``: one wave of rollouts as the noise probe draws it."""

__all__ = ["AFTER_DECISION", "MAX_ERROR_SHARE", "Night"]

AFTER_DECISION = ("stage", "commit")  # stages after the decision: they ask no model


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
        probe: Probe | None = None,
        budget: Budget | None = None,
    ) -> None:
        self.cfg = config
        self.observer = observer
        self.foreground = foreground  # started from a terminal: see run_night
        self.project = project
        # the night's calls, through its spend cap; a child night (``budget``: its parent's,
        # :mod:`.skills`) counts its own calls here and spends from its parent's budget
        caps = (config.budget.max_calls, config.budget.max_tokens) if budget is None else (0, 0)
        self.spend = BudgetCompleter(pool, max_calls=caps[0], max_tokens=caps[1])
        self.run = run
        self.clock = clock
        self.progress = progress
        self.dry_run = dry_run
        self.resumed = resumed
        self.gate: GateConfig = config.gate
        replayer, self.reflector = self._model_parts(config, run, progress)
        self.findings = Findings()
        # the same lists as the findings: the report and the stages read them here
        self.trials: list[Trial] = self.findings.trials
        self.notes: list[str] = self.findings.notes
        self.no_edit_reasons: list[str] = self.findings.no_edit_reasons
        self.harmful_edits = self.findings.harmful_edits
        self.lost_tasks = self.findings.lost_tasks  # none of whose calls answered (named once)
        # what tonight showed of the model's noise, and whether the budget is tight (its
        # methods are its only writers): the probe's verdict, the first rollouts' share of
        # disagreeing tasks (what the spend model learns from), the estimate's warning
        self.noise = Noise()
        # a wave of rollouts: the noise probe the driver hands in (:mod:`.quiet.probe`), or
        # K fresh samples of every task
        draw = functools.partial(probe, self) if probe is not None else None
        self.learning = self._measure(config, replayer, progress, draw, budget)
        self.reflections: dict[str, ReflectOutcome] = {}
        self.sessions_mined = 0
        self.mining_estimate: int | None = None
        # the project's watched adopted lines, read once a night (.line_removals)
        self.watched: list[WatchedLine] | None = None
        self._rollouts_recorded = 0
        self._calls_at: dict[str, int] = {}
        self._hits_at: dict[str, int] = {}
        # the project's task archive while the night runs (set by the driver; None in a
        # bare Night): what earlier nights recorded, e.g. each task's noise (see .quiet)
        self.archive: TaskArchive | None = None
        # the live documents as read (set by the driver): checked as each stage begins
        self.live: Live | None = None

    def _model_parts(
        self, config: SleepConfig, run: RunDir, progress: Progress
    ) -> tuple[Replayer, Reflector]:
        """What asks the model tonight, through the night's spend cap: the replayer
        (attempts, judged) and the reflector, both keeping evidence when configured."""
        evidence = (
            functools.partial(
                run.append_evidence, max_chars=config.night.evidence_max_chars, sanitized=True
            )
            if config.night.evidence
            else None
        )
        replayer = Replayer(
            pool=self.spend,
            marker=SELF_MARKER,
            record=self._record_rollouts,
            evidence=evidence,
            progress=progress,
            carry=self.spend.carry,
        )
        reflector = Reflector(
            pool=self.spend,
            marker=SELF_MARKER,
            preferences=config.night.preferences,
            score=self.score,
            evidence=evidence,
            progress=progress,
        )
        return replayer, reflector

    # -- what the learning modules share (:class:`.learn.measure.Measure`) -------------

    def _measure(
        self,
        config: SleepConfig,
        replayer: Replayer,
        progress: Progress,
        draw: Draw | None,
        budget: Budget | None,
    ) -> Measure:
        """The learning modules' view of this night, over its own parts."""
        night = config.night
        return Measure(
            gate=self.gate,
            replayer=replayer,
            spend=self.spend,
            budget=budget,
            reflect=self.reflect,
            settings=LearnSettings(
                rounds=night.rounds,
                folds=night.folds,
                seed=night.seed,
                evolve_skill=night.evolve_skill,
                evolve_memory=night.evolve_memory,
                dream_rollouts=night.dream_rollouts,
                max_judge_failures=night.max_judge_failures,
            ),
            journal=self,
            draw=draw,
            note=progress.note,
            handoff=bool(config.pool is not None and config.pool.handoff),
            findings=self.findings,
            noise=self.noise,
        )

    @property
    def replayer(self) -> Replayer:
        return self.learning.replayer

    @replayer.setter
    def replayer(self, replayer: Replayer) -> None:
        self.learning.replayer = replayer

    @property
    def stage(self) -> str:
        return self.learning.stage

    @property
    def consistent_tonight(self) -> bool | None:
        """The noise probe's verdict (:mod:`.quiet.probe`): True, every probed pair agreed;
        False, answers disagree; None, not probed."""
        return self.noise.consistent_tonight

    @property
    def noise_seen(self) -> float | None:
        return self.noise.seen

    @property
    def tight_budget(self) -> bool:
        """The estimate says the budget will cut the night short (:mod:`.learn.budget_plan`)."""
        return self.noise.tight_budget

    # -- gate scores -----------------------------------------------------------------

    def score(self, result: RolloutResult) -> float:
        return self.learning.score(result)

    def mean_score(self, results: Sequence[RolloutResult]) -> float:
        return self.learning.mean_score(results)

    # -- small helpers ---------------------------------------------------------------

    def _record_rollouts(self, rows: list[dict[str, Any]]) -> None:
        self.run.append_rollouts(rows)
        self._rollouts_recorded += len(rows)
        self.observer.rollouts_recorded(self._rollouts_recorded)

    def begin(self, name: str) -> None:
        self.learning.begin(name)

    def end(self, name: str, **extra: Any) -> None:
        self.learning.end(name, **extra)

    def end_after_decision(self, name: str, **extra: Any) -> None:
        """End a stage that follows the night's decision (staging, commit): it asks no
        model, and a prompt still waiting for an answer (a handoff night the budget
        stopped) decides nothing any more, so it is not a reason to stop here."""
        self.stage_ended(name, **extra)

    def stage_began(self, name: str) -> None:
        """The journal's side of :meth:`begin` (:class:`.learn.measure.StageJournal`); a
        stage before the decision first checks the live documents are the ones read."""
        if self.live is not None and name not in AFTER_DECISION:
            check_unchanged(self.live, name)
        self.progress.stage(name)
        self._calls_at[name] = self.spend.calls_this_run
        self._hits_at[name] = self.spend.cache_hits
        self.run.begin_stage(name, self.clock())
        self.observer.stage_started(name)

    def stage_ended(self, name: str, **extra: Any) -> None:
        calls = self.spend.calls_this_run - self._calls_at.get(name, self.spend.calls_this_run)
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
        return self.learning.waiting()

    def check_waiting(self, stage: str) -> None:
        self.learning.check_waiting(stage)

    def check_budget(self, stage: str) -> None:
        self.learning.check_budget(stage)

    def budget_stop(self, stage: str) -> BudgetExceededError:
        return self.learning.budget_stop(stage)

    # -- stages ----------------------------------------------------------------------

    def check_degenerate(
        self,
        stage: str,
        results: Sequence[RolloutResult],
        *,
        candidate: bool = False,
        tasks: Sequence[TaskRecord] = (),
    ) -> None:
        """:meth:`.learn.measure.Measure.check_degenerate`."""
        self.learning.check_degenerate(stage, results, candidate=candidate, tasks=tasks)

    async def reflect(
        self, key: str, target: EditTarget, docs: Docs, sets: Sequence[RolloutSet]
    ) -> ReflectOutcome:
        saved = self.run.journal.checkpoint.get(f"reflect.{key}")
        if saved is not None:
            outcome = ReflectOutcome.from_dict(saved)
            if key not in self.reflections:  # an earlier run of the night asked it
                self.spend.carry(outcome.calls, 0)
        else:
            outcome = await self.reflector.reflect(
                target=target, docs=docs, sets=sets, budget=self.cfg.night.edit_budget
            )
            # a reflection missing a reply is asked again on resume, and so is one whose
            # every call failed (an outage, a refused budget: no reply either)
            no_reply = not outcome.edits and not outcome.raw and bool(outcome.errors)
            if not self.waiting() and not no_reply:
                self.run.checkpoint(f"reflect.{key}", outcome.to_dict())
        self.reflections[key] = outcome
        if not outcome.edits and outcome.reason:
            self.no_edit_reasons.append(f"{key}: {outcome.reason}")
        return outcome

    def check_reflections(self, stage: str, outcomes: Sequence[ReflectOutcome]) -> None:
        self.learning.check_reflections(stage, outcomes)

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
