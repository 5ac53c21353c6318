"""Step stage 1, rollout: every micro-batch's items attempted with the current skill, at once.

Each micro-batch draws the step's training sample
(:func:`~skillopt.trainer.sample_ids.train_sample`) through
:func:`skillopt.trainer.rollouts.rollout`, which keeps finished rows on disk, so a resumed
step attempts only what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from skillopt.concurrency import gather_indexed
from skillopt.trainer.envs.base import RolloutResult
from skillopt.trainer.rollouts import mean_scores, rollout
from skillopt.trainer.sample_ids import train_sample
from skillopt.trainer.step.context import Record, StepInput

if TYPE_CHECKING:
    from skillopt.trainer.core import TrainerCore

__all__ = ["RolledOut", "roll_out"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RolledOut:
    per_batch: tuple[tuple[RolloutResult, ...], ...]

    @property
    def results(self) -> list[RolloutResult]:
        return [r for batch in self.per_batch for r in batch]

    def record(self) -> Record:
        hard, soft = mean_scores(self.results)
        return {"rollout_hard": hard, "rollout_soft": soft, "rollout_n": len(self.results)}


async def roll_out(core: TrainerCore, inp: StepInput) -> RolledOut:
    """Every micro-batch at once, under the current skill."""

    async def one(a: int) -> list[RolloutResult]:
        items = [core.items[i] for i in inp.micro[a].item_ids]
        where = inp.batch_dir(a) / "rollout"
        return await rollout(core.ctx, items, inp.skill, where, train_sample(inp.step))

    per_batch = await gather_indexed(one, len(inp.micro))
    return RolledOut(per_batch=tuple(tuple(b) for b in per_batch))
