"""The environment protocol the trainer drives.

An environment owns its items (train / val / test) and knows how to roll a skill out on one item
and score the result. Concurrency, persistence and resume live in the trainer, so an
environment only implements :meth:`Environment.rollout` for a single item: a chat environment
sends one request through the pool's target role, an exec environment runs an agent CLI in
``ctx.workdir``. Results (:class:`skillopt.types.RolloutResult`, the night's record too)
carry the text the optimizer sees (``trajectory``), already trimmed; the run directory
stores them in the trainer's own JSON shape (:func:`rollout_to_json`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from skillopt.backends.base import Completer
from skillopt.errors import ConfigError
from skillopt.types import RolloutResult, Split

__all__ = [
    "Completer",
    "EnvItem",
    "Environment",
    "RolloutContext",
    "RolloutResult",
    "Split",
    "parse_split",
    "rollout_from_json",
    "rollout_to_json",
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
    use_cache: bool = True  # False: a fresh sample (the gate's), never a cached reply


def rollout_to_json(result: RolloutResult) -> dict[str, Any]:
    """A rollout as the trainer's run directory stores it (``results.json``, partial rows)."""
    return {
        "id": result.task_id,
        "hard": result.hard,
        "soft": result.soft,
        "task_type": result.task_type,
        "fail_reason": result.reason,
        "prediction": result.response,
        "trajectory": result.trajectory,
        "error": result.error,
        "extras": dict(result.extras),
    }


def rollout_from_json(raw: Mapping[str, Any]) -> RolloutResult:
    return RolloutResult(
        task_id=str(raw["id"]),
        hard=float(raw["hard"]),
        soft=float(raw["soft"]),
        task_type=str(raw.get("task_type", "")),
        reason=str(raw.get("fail_reason", "")),
        response=str(raw.get("prediction", "")),
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
