"""The run's context, shared by everything that works on a training run.

:class:`RunContext` is the run (config, environment, the counting completer, its run
directory, the diagnostics noted so far); :class:`Sample` is which sample a rollout draws;
:func:`skill_hash` names a skill's text in files and caches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from skillopt.backends.wrappers import StageCounter
from skillopt.logging import get_logger
from skillopt.skilldoc import content_hash
from skillopt.trainer.config import TrainerConfig
from skillopt.trainer.envs.base import Environment
from skillopt.trainer.persistence import RunDir

__all__ = ["RunContext", "Sample", "skill_hash"]

_log = get_logger(__name__)


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
