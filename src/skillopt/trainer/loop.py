"""The ReflACT training loop: baseline, epochs of gated steps, epoch boundaries, final phase.

A step is rollout -> reflect -> merge -> select -> update -> evaluate (:mod:`.phases`), with
accumulation micro-batches rolled out and analysed concurrently. After every step the run
directory holds everything needed to continue; :meth:`Trainer.run` on an existing directory
resumes after the last completed step and redoes a partly done step from its saved rollouts
and patches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from skillopt.errors import ConfigError, CorruptStateError, RunFailedError, SkillOptError
from skillopt.logging import get_logger
from skillopt.progress import Progress
from skillopt.redact import sanitize
from skillopt.trainer.config import TrainerConfig
from skillopt.trainer.core import TrainerCore
from skillopt.trainer.data import plan_train_epoch
from skillopt.trainer.envs.base import Completer, Environment
from skillopt.trainer.epoch_end import EpochEnd
from skillopt.trainer.final import FinalPhase
from skillopt.trainer.persistence import RunState
from skillopt.trainer.rollouts import mean_scores, rollout
from skillopt.trainer.run_context import skill_hash
from skillopt.trainer.step.run import run_step, step_input

__all__ = ["Trainer", "run_failure"]

_log = get_logger(__name__)


class Trainer:
    """One training run over ``env`` into ``cfg.out_root``: resumes when the directory holds
    an earlier run of the same plan."""

    def __init__(
        self,
        cfg: TrainerConfig,
        env: Environment,
        completer: Completer,
        *,
        pool_accounting: Callable[[], dict[str, Any]] | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.core = TrainerCore(
            cfg, env, completer, pool_accounting=pool_accounting, progress=progress
        )
        self.epoch_end = EpochEnd(self.core)
        self.final = FinalPhase(self.core)

    async def run(self) -> dict[str, Any]:
        """Train (or resume) to the end; returns the summary also written to summary.json.

        A failure inside concurrent stages surfaces as the underlying SkillOptError rather
        than an exception group, so callers catch our own types only."""
        try:
            return await self._run()
        except BaseExceptionGroup as group:
            leaf = _first_leaf(group)
            if isinstance(leaf, SkillOptError):
                raise leaf from group
            raise
        finally:
            self.core.run_dir.sync_dirs()
            if self.core.progress is not None:
                self.core.progress.close()

    async def _run(self) -> dict[str, Any]:
        core = self.core
        core.timing.start()
        state, history = await self._start()
        global_step = 0
        for epoch in range(1, core.cfg.train.num_epochs + 1):
            if epoch > state.step_buffer_epoch:
                state = state.model_copy(update={"step_buffer": [], "step_buffer_epoch": epoch})
            state, global_step = await self._epoch(state, history, epoch, global_step)
            if epoch not in state.epochs_closed:
                core.phase(f"end of epoch {epoch}")
                state = await self.epoch_end.close(state, epoch, global_step)
        core.phase("final validation and test")
        failure = run_failure(history)
        summary = await self.final.finish(state, history, failure=failure)
        core.timing.finish(core.pool_accounting() if core.pool_accounting else None)
        core.run_dir.write_json(core.run_dir.root / "timing.json", core.timing.to_json())
        if failure is not None:
            raise failure
        return summary

    async def _epoch(
        self, state: RunState, history: list[dict[str, Any]], epoch: int, global_step: int
    ) -> tuple[RunState, int]:
        """The epoch's steps not completed yet; returns the state and the last step number."""
        core = self.core
        train = core.cfg.train
        batches = plan_train_epoch(
            core.train_ids,
            epoch=epoch,
            batch_size=train.batch_size,
            batches=core.plan.batches_per_epoch,
            seed=train.seed,
        )
        for step_in_epoch in range(core.plan.steps_per_epoch):
            global_step += 1
            if global_step <= state.last_completed_step:
                continue
            acc = train.accumulation
            micro = batches[step_in_epoch * acc : (step_in_epoch + 1) * acc]
            total = state.total_steps
            core.phase(f"step {global_step}/{total} epoch {epoch}")
            _log.info("step_start", step=global_step, epoch=epoch)
            inp = step_input(
                core, state, step=global_step, epoch=epoch, step_in_epoch=step_in_epoch, micro=micro
            )
            state, record = await run_step(core, inp)
            history.append(record)
            self._persist_step(state, history, record)
            _log.info(
                "step_done",
                step=global_step,
                action=record["action"],
                current_score=state.current_score,
                best_score=state.best_score,
            )
            if core.progress is not None:
                core.progress.note(
                    f"step {global_step}/{total}: {record['action']}, val gate "
                    f"{state.current_score:.3f} (best {state.best_score:.3f})"
                )
        return state, global_step

    # ------------------------------------------------------------------ start / resume

    async def _start(self) -> tuple[RunState, list[dict[str, Any]]]:
        run = self.core.run_dir
        run.prepare()
        state = run.load_state()
        history = run.load_history()
        if state is None:
            if history:
                raise CorruptStateError(
                    str(run.state_path), "missing while history.json exists; refusing to restart"
                )
            return await self._baseline(), []
        self._check_resumable()
        run.publish_best(state)  # heal a copy left behind by a crash between writes
        history = [h for h in history if int(h.get("step", 0)) <= state.last_completed_step]
        _log.info("resume", last_completed_step=state.last_completed_step)
        return state, history

    async def _baseline(self) -> RunState:
        """A fresh run: the initial skill, the run's config and its val baseline."""
        core = self.core
        run = core.run_dir
        init = sanitize(core.read_skill_init())
        run.write_text(run.skill_path(0), init)
        run.write_json(run.root / "config.json", core.config_dump())
        _log.info("baseline_start", n_val=len(core.val))
        core.phase(f"baseline on {len(core.val)} val items")
        hard, soft = mean_scores(
            await rollout(core.ctx, core.val, init, run.root / "selection_eval_baseline")
        )
        score = core.score(hard, soft)
        digest = skill_hash(init)
        state = RunState(
            total_steps=core.plan.total_steps,
            current_skill_path=run.rel(run.skill_path(0)),
            best_skill_path=run.rel(run.skill_path(0)),
            current_score=score,
            best_score=score,
            baseline_hash=digest,
            baseline_score=score,
            selection_cache={digest: (hard, soft)},
        )
        run.save_state(state)
        _log.info("baseline_done", hard=hard, soft=soft, score=score)
        return state

    def _check_resumable(self) -> None:
        """A resumed run must cut its epochs the same way (more epochs are fine)."""
        core = self.core
        path = core.run_dir.root / "config.json"
        saved = core.run_dir.read_json(path)
        try:
            old_train = saved["config"]["train"]
            old_plan = saved["plan"]
        except (KeyError, TypeError) as exc:
            raise CorruptStateError(str(path), "missing config or plan") from exc
        train = core.cfg.train
        for key in ("batch_size", "accumulation", "seed"):
            if old_train.get(key) != getattr(train, key):
                raise ConfigError(
                    f"was {old_train.get(key)!r} when the run started, now "
                    f"{getattr(train, key)!r}; use a new out_root to change it",
                    key=f"train.{key}",
                )
        if old_plan.get("train_size") != core.plan.train_size:
            raise ConfigError(
                f"the train split had {old_plan.get('train_size')} items when the run "
                f"started, now {core.plan.train_size}",
                key="env.data_dir",
            )

    def _persist_step(
        self, state: RunState, history: list[dict[str, Any]], record: dict[str, Any]
    ) -> None:
        core = self.core
        run = core.run_dir
        run.save_history(history)
        run.save_state(state)
        step = int(record["step"])
        run.save_step_record(step, record)
        run.write_json(run.step_dir(step) / "timing.json", core.timing.step(step))


def run_failure(history: list[dict[str, Any]]) -> RunFailedError | None:
    """The run failed when every step that had something to learn from failed to update
    (its optimizer calls were unusable); steps with nothing to learn do not count."""
    attempted = [h for h in history if h.get("action") != "skip_no_patches" or "update_failed" in h]
    failed = [h for h in attempted if "update_failed" in h]
    if not failed or len(failed) < len(attempted):
        return None
    first = failed[0]
    cause = first["update_failed"]
    return RunFailedError(
        str(cause["stage"]),
        f"no step could update the skill ({len(failed)} of {len(history)} steps failed); "
        f"step {first['step']}: {cause['cause']}",
    )


def _first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error
