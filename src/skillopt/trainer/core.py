"""What every part of a training run shares: configuration, environment, items, plan, run
directory, the call context, and the few helpers the step, epoch end and final phase all use.

The phases are collaborators that hold one :class:`TrainerCore`; none inherits from it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from skillopt.backends.wrappers import StageCounter
from skillopt.errors import ConfigError, ReplyFormatError, RetryableBackendError
from skillopt.logging import get_logger
from skillopt.progress import Progress
from skillopt.skilldoc import migrate_on_read
from skillopt.trainer.config import TrainerConfig
from skillopt.trainer.data import StepPlan, eval_batch, plan_steps
from skillopt.trainer.envs.base import Completer, Environment, EnvItem
from skillopt.trainer.persistence import RunDir, RunState
from skillopt.trainer.replies import ask_json
from skillopt.trainer.rollouts import mean_scores, rollout
from skillopt.trainer.run_context import RunContext, skill_hash
from skillopt.trainer.timing import RunTiming
from skillopt.types import Split

__all__ = ["TrainerCore"]

M = TypeVar("M", bound=BaseModel)

_log = get_logger(__name__)


class TrainerCore:
    """The run's configuration, environment, items, plan and the helpers every phase uses."""

    def __init__(
        self,
        cfg: TrainerConfig,
        env: Environment,
        completer: Completer,
        *,
        pool_accounting: Callable[[], dict[str, Any]] | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.cfg = cfg
        self.env = env
        self.run_dir = RunDir(cfg.out_root)
        self.progress = progress
        self.ctx = RunContext(
            cfg=cfg,
            env=env,
            completer=StageCounter(completer, on_call=self._call_done),
            run=self.run_dir,
        )
        self.pool_accounting = pool_accounting
        self.items = {item.id: item for split in Split for item in env.items(split)}
        self.train_ids = [i.id for i in env.items(Split.TRAIN)]
        self.val = self._subset(Split.VAL, cfg.evaluation.sel_env_num)
        self.test = self._subset(Split.TEST, cfg.evaluation.test_env_num)
        self.plan: StepPlan = plan_steps(
            loaded_train_size=len(self.train_ids),
            configured_train_size=cfg.train.train_size,
            batch_size=cfg.train.batch_size,
            accumulation=cfg.train.accumulation,
            num_epochs=cfg.train.num_epochs,
        )
        self.timing = RunTiming()

    def _subset(self, split: Split, env_num: int) -> list[EnvItem]:
        ids = eval_batch([i.id for i in self.env.items(split)], env_num)
        return [self.items[i] for i in ids]

    def phase(self, label: str) -> None:
        if self.progress is not None:
            self.progress.stage(label)

    def _call_done(self, stage: str) -> None:
        if self.progress is not None:
            self.progress.call_done(stage=stage)

    def score(self, hard: float, soft: float) -> float:
        return self.cfg.gate.score(hard, soft)

    async def validate(
        self, state: RunState, skill: str, out_dir: Path
    ) -> tuple[RunState, float, float, bool]:
        """Val scores of ``skill`` from the selection cache, else a val rollout."""
        digest = skill_hash(skill)
        cached = state.selection_cache.get(digest)
        if cached is not None:
            return state, cached[0], cached[1], True
        hard, soft = mean_scores(await rollout(self.ctx, self.val, skill, out_dir))
        cache = {**state.selection_cache, digest: (hard, soft)}
        return state.model_copy(update={"selection_cache": cache}), hard, soft, False

    def read_skill_init(self) -> str:
        path = self.cfg.env.skill_init
        if not path:
            return ""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise ConfigError(f"skill file not found: {path}", key="env.skill_init") from exc
        migration = migrate_on_read(text)
        if migration.migrated:
            _log.info("skill_init_migrated", path=path, legacy_markers=migration.markers)
        return migration.text

    def config_dump(self) -> dict[str, Any]:
        dump = self.cfg.redacted_dump()
        dump.pop("out_root", None)  # where the file is; keeps runs comparable byte for byte
        dump.pop("executor", None)  # where rollouts ran: the same run either way
        return {"config": dump, "plan": self.plan_dict()}

    def plan_dict(self) -> dict[str, int]:
        p = self.plan
        return {
            "train_size": p.train_size,
            "steps_per_epoch": p.steps_per_epoch,
            "batches_per_epoch": p.batches_per_epoch,
            "total_steps": p.total_steps,
        }

    async def ask_optional(self, prompt: str, schema: type[M], stage: str) -> M | None:
        """An optimizer reply, or None when the call failed (the cause is a diagnostic)."""
        try:
            reply = await ask_json(
                self.ctx.completer,
                prompt=prompt,
                schema=schema,
                stage=stage,
                timeout_s=self.cfg.backend.optimizer_timeout_s,
                max_output_tokens=self.cfg.backend.optimizer_max_output_tokens,
            )
        except (ReplyFormatError, RetryableBackendError) as exc:
            self.ctx.note(stage=stage, error=str(exc))
            return None
        return reply.value
