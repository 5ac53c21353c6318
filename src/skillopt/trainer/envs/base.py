"""The environment protocol the trainer drives.

An environment owns its items (train / val / test) and knows how to roll a skill out on one item
and score the result. Concurrency, persistence and resume live in the trainer, so an
environment only implements :meth:`Environment.rollout` for a single item: a chat environment
sends one request through the pool's target role, an exec environment runs an agent CLI in
``ctx.workdir``. Results carry the text the optimizer sees (``trajectory``), already trimmed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from skillopt.backends.base import Completer
from skillopt.errors import ConfigError
from skillopt.types import Split

__all__ = [
    "Completer",
    "EnvItem",
    "Environment",
    "RolloutContext",
    "RolloutResult",
    "Split",
    "parse_split",
]


_SPLIT_ALIASES = {
    "train": Split.TRAIN,
    "val": Split.VAL,
    "valid": Split.VAL,
    "valid_seen": Split.VAL,
    "selection": Split.VAL,
    "test": Split.TEST,
    "valid_unseen": Split.TEST,
}


def parse_split(name: str) -> Split:
    """Split by name or alias; an unknown name is an error (never a silent fallback to val)."""
    try:
        return _SPLIT_ALIASES[name.strip().lower()]
    except KeyError:
        known = ", ".join(sorted(_SPLIT_ALIASES))
        raise ConfigError(f"unknown split {name!r} (known: {known})", key="split") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvItem:
    id: str
    task_type: str
    data: Mapping[str, Any]  # the item as loaded (JSON-like)


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutContext:
    completer: Completer
    timeout_s: float
    max_output_tokens: int
    workdir: Path  # a per-item directory the environment may use (exec workspaces)
    sample_id: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutResult:
    """One scored attempt. ``hard`` is the pass/fail score (0..1), ``soft`` the partial one."""

    item_id: str
    hard: float
    soft: float
    task_type: str
    fail_reason: str = ""  # "<kind>: details" for failures, "" on success
    prediction: str = ""
    trajectory: str = ""  # what the optimizer sees about this attempt
    error: str = ""  # set when the attempt itself failed (backend error), not the answer
    extras: Mapping[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.hard >= 1e-9

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.item_id,
            "hard": self.hard,
            "soft": self.soft,
            "task_type": self.task_type,
            "fail_reason": self.fail_reason,
            "prediction": self.prediction,
            "trajectory": self.trajectory,
            "error": self.error,
            "extras": dict(self.extras),
        }

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> RolloutResult:
        return RolloutResult(
            item_id=str(raw["id"]),
            hard=float(raw["hard"]),
            soft=float(raw["soft"]),
            task_type=str(raw.get("task_type", "")),
            fail_reason=str(raw.get("fail_reason", "")),
            prediction=str(raw.get("prediction", "")),
            trajectory=str(raw.get("trajectory", "")),
            error=str(raw.get("error", "")),
            extras=dict(raw.get("extras", {})),
        )


@runtime_checkable
class Environment(Protocol):
    """What the trainer needs from a benchmark."""

    @property
    def name(self) -> str: ...

    def items(self, split: Split) -> Sequence[EnvItem]:
        """The split's items in file order."""
        ...

    def task_types(self) -> list[str]:
        """Every task type over all splits, sorted (for per-type summaries)."""
        ...

    async def rollout(self, item: EnvItem, skill: str, ctx: RolloutContext) -> RolloutResult:
        """Attempt ``item`` with ``skill`` deployed; raise a BackendError if the call failed."""
        ...
