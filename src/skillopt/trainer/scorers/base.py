"""What every scorer returns, and what an asynchronous scorer may use.

A scorer turns an attempt into a :class:`Verdict`: the pass score (``hard``, 0..1), a graded
score (``soft``), a ``reason`` of the form ``"kind: details"`` ("" on a pass) and a one-line
``check`` the analysts read. The text scorers are pure functions of the reply and the item;
the rubric scorer asks the optimizer role and the program scorer runs a checker command, so
the protocol is asynchronous and takes a :class:`ScoreContext`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from skillopt.backends.base import Completer
from skillopt.trainer.envs.base import EnvItem
from skillopt.types import RolloutResult

__all__ = ["UNSCORED", "ScoreContext", "Scorer", "Verdict", "passed", "unscored"]

#: The error kind of an attempt whose answer came back but could not be scored (a judge
#: that gave no usable verdict): an untested sample, not a broken call.
UNSCORED = "judge_unusable"


def unscored(result: RolloutResult) -> bool:
    """Whether ``result``'s answer came back but its judging gave no usable verdict."""
    return result.error.startswith(f"{UNSCORED}:")


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    hard: float
    soft: float
    reason: str  # "" when the attempt passed
    check: str  # one line for the trajectory ("Verification: ...")
    extras: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""  # the attempt could not be scored (an error row, not a zero)

    def result(
        self,
        item: EnvItem,
        *,
        response: str,
        trajectory: str,
        extras: Mapping[str, Any] | None = None,
    ) -> RolloutResult:
        """The rollout result of ``item`` scored by this verdict (its extras merged in)."""
        return RolloutResult(
            task_id=item.id,
            hard=self.hard,
            soft=self.soft,
            task_type=item.task_type,
            reason=self.reason,
            response=response,
            trajectory=trajectory,
            error=self.error,
            extras={**dict(extras or {}), **self.extras},
        )


def passed(
    hard: float,
    soft: float,
    *,
    failure: str,
    check: str,
    extras: Mapping[str, Any] | None = None,
) -> Verdict:
    """A verdict whose reason is ``failure`` unless ``hard`` is a full pass."""
    reason = "" if hard >= 1.0 else failure
    return Verdict(hard=hard, soft=soft, reason=reason, check=check, extras=dict(extras or {}))


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoreContext:
    completer: Completer | None = None  # the optimizer role (rubric judging)
    timeout_s: float = 60.0
    max_output_tokens: int = 1024
    workspace: Path | None = None  # where the attempt left its files (program checking)
    rollout_dir: Path | None = None  # scratch beside the workspace, never inside it


class Scorer(Protocol):
    """Scores one attempt: ``reply`` is the answer text, ``item`` the item as loaded."""

    @property
    def name(self) -> str: ...

    async def score(self, reply: str, item: Mapping[str, Any], ctx: ScoreContext) -> Verdict: ...
