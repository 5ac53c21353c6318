"""What every stage of a step shares: the step's input, the record, the optimizer call.

:class:`StepInput` is one step's fixed input; every stage adds its fields to the step's
``Record`` (its line in the run's history); :func:`ask` is one validated optimizer call on
the run's context (:class:`~skillopt.trainer.run_context.RunContext`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillopt.backends.base import ReplySchema
from skillopt.trainer.data import BatchSpec
from skillopt.trainer.persistence import RunState
from skillopt.trainer.replies import ask_json
from skillopt.trainer.run_context import RunContext

__all__ = [
    "REJECTED_EDITS_BUDGET",
    "SUGGESTIONS_BUDGET",
    "Record",
    "StepInput",
    "ask",
]


#: Characters of edit suggestions one rewrite prompt carries; whole suggestions only.
SUGGESTIONS_BUDGET = 8000


#: Characters of a rejected step's edits the step buffer keeps for later prompts.
REJECTED_EDITS_BUDGET = 2000


async def ask(
    ctx: RunContext, prompt: str, schema: Any, stage: str, shape: ReplySchema | None = None
) -> Any:
    backend = ctx.cfg.backend
    return await ask_json(
        ctx.completer,
        prompt=prompt,
        schema=schema,
        stage=stage,
        timeout_s=backend.optimizer_timeout_s,
        max_output_tokens=backend.optimizer_max_output_tokens,
        shape=shape,
    )


Record = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepInput:
    """What every phase of one step reads."""

    step: int
    epoch: int
    step_in_epoch: int
    micro: tuple[BatchSpec, ...]
    state: RunState
    skill: str  # the current skill
    step_buffer: str  # earlier steps of this epoch, as the prompts show them
    meta_skill: str  # the optimizer's memory, as the prompts show it
    dir: Path

    def batch_dir(self, index: int) -> Path:
        return self.dir if len(self.micro) == 1 else self.dir / f"batch_{index}"
