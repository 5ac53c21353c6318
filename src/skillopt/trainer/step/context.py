"""What every stage of a step shares: the run's context, the step's input, the record.

:class:`RunContext` is the run (config, environment, the counting completer, its run
directory, the step's diagnostics); :class:`StepInput` is one step's fixed input;
:class:`Sample` is which sample a rollout draws; every stage adds its fields to the step's
``Record`` (its line in the run's history).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillopt.backends.wrappers import StageCounter
from skillopt.logging import get_logger
from skillopt.skilldoc import content_hash
from skillopt.trainer.config import TrainerConfig
from skillopt.trainer.data import BatchSpec
from skillopt.trainer.envs.base import Environment
from skillopt.trainer.persistence import RunDir, RunState
from skillopt.trainer.replies import ask_json

__all__ = [
    "REJECTED_EDITS_BUDGET",
    "SUGGESTIONS_BUDGET",
    "Record",
    "RunContext",
    "Sample",
    "StepInput",
    "ask",
    "skill_hash",
]

_log = get_logger(__name__)


#: Characters of edit suggestions one rewrite prompt carries; whole suggestions only.
SUGGESTIONS_BUDGET = 8000


#: Characters of a rejected step's edits the step buffer keeps for later prompts.
REJECTED_EDITS_BUDGET = 2000


def skill_hash(text: str) -> str:
    return content_hash(text)[:16]


@dataclass(slots=True, kw_only=True)
class RunContext:
    cfg: TrainerConfig
    env: Environment
    completer: StageCounter
    run: RunDir
    diagnostics: list[dict[str, Any]] = field(default_factory=list)

    def note(self, **event: Any) -> None:
        """Record a per-call problem (kept in the step record, never silently dropped)."""
        self.diagnostics.append(event)
        _log.warning("trainer_diagnostic", **event)

    def last_error(self, stage: str) -> str:
        """The error of the latest diagnostic noted for ``stage`` ("" when none)."""
        errors = [str(d.get("error", "")) for d in self.diagnostics if d.get("stage") == stage]
        return errors[-1] if errors else ""

    def sorted_diagnostics(self) -> list[dict[str, Any]]:
        """Diagnostics in a stable order (they arrive in completion order)."""
        return sorted(self.diagnostics, key=lambda d: json.dumps(d, sort_keys=True, default=str))


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """Which sample a rollout draws: the default is the cacheable sample 0; the gate draws
    numbered fresh samples that bypass the response cache."""

    sample_id: int = 0
    fresh: bool = False


async def ask(ctx: RunContext, prompt: str, schema: Any, stage: str) -> Any:
    backend = ctx.cfg.backend
    return await ask_json(
        ctx.completer,
        prompt=prompt,
        schema=schema,
        stage=stage,
        timeout_s=backend.optimizer_timeout_s,
        max_output_tokens=backend.optimizer_max_output_tokens,
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
