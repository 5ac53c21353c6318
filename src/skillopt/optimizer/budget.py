"""Edit budget: how many edits one step may apply (the loop's "learning rate").

Public API::

    ScheduleKind                                   # constant | linear | cosine | autonomous
    NO_LIMIT = 999                                 # the autonomous schedule's "no cap"
    BudgetSchedule(kind, max_edits, min_edits, total_steps)
    edit_budget(step, schedule) -> int             # step is 1-based; 0 means "before any step"
    scheduled_budget(kind, *, max_edits, min_edits, step, total_steps) -> int  # the two at once
    schedule_state(step) -> dict[str, int]         # {"current_step": n}, for checkpoints
    step_from_state(state) -> int                  # missing key -> 0

The budget is a pure function of the step counter, so a resumed run restores it from the
saved counter alone. With ``t = min(step, total) / total``:

* constant: ``max``;
* linear: ``round(max + (min - max) * t)``;
* cosine: ``round(min + (max - min) * (1 + cos(pi * t)) / 2)``;

rounded with Python's ``round`` (half to even) and never below ``min``; ``total_steps <= 1``
gives ``max``. Step 1 is already decayed (``t = 1/total``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from skillopt.errors import ConfigError, CorruptStateError

__all__ = [
    "NO_LIMIT",
    "BudgetSchedule",
    "ScheduleKind",
    "edit_budget",
    "schedule_state",
    "scheduled_budget",
    "step_from_state",
]

NO_LIMIT = 999


class ScheduleKind(StrEnum):
    CONSTANT = "constant"
    LINEAR = "linear"
    COSINE = "cosine"
    AUTONOMOUS = "autonomous"  # the optimizer decides; the schedule imposes no cap


def _non_negative_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"must be an integer >= 0, got {value!r}", key=name)


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetSchedule:
    kind: ScheduleKind = ScheduleKind.COSINE
    max_edits: int = 4
    min_edits: int = 2
    total_steps: int = 1

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", ScheduleKind(self.kind))
        except ValueError as exc:
            raise ConfigError(f"unknown schedule {self.kind!r}", key="budget.kind") from exc
        _non_negative_int("budget.max_edits", self.max_edits)
        _non_negative_int("budget.min_edits", self.min_edits)
        _non_negative_int("budget.total_steps", self.total_steps)
        if self.min_edits > self.max_edits:
            raise ConfigError(
                f"min_edits ({self.min_edits}) exceeds max_edits ({self.max_edits})",
                key="budget.min_edits",
            )


def edit_budget(step: int, schedule: BudgetSchedule) -> int:
    """The number of edits allowed at ``step`` (1-based)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ConfigError(f"step must be an integer >= 0, got {step!r}", key="step")
    kind, hi, lo, total = (
        schedule.kind,
        schedule.max_edits,
        schedule.min_edits,
        schedule.total_steps,
    )
    if kind is ScheduleKind.AUTONOMOUS:
        return NO_LIMIT
    if kind is ScheduleKind.CONSTANT or total <= 1:
        return hi
    t = min(step, total) / total
    if kind is ScheduleKind.LINEAR:
        value = hi + (lo - hi) * t
    else:
        value = lo + (hi - lo) * (1.0 + math.cos(math.pi * t)) / 2.0
    return max(lo, round(value))


def scheduled_budget(
    kind: ScheduleKind | str, *, max_edits: int, min_edits: int, step: int, total_steps: int
) -> int:
    """Edits allowed at 1-based ``step`` under the schedule ``kind`` (the trainer's
    ``optimizer.lr_scheduler``)."""
    schedule = BudgetSchedule(
        kind=ScheduleKind(kind), max_edits=max_edits, min_edits=min_edits, total_steps=total_steps
    )
    return edit_budget(step, schedule)


def schedule_state(step: int) -> dict[str, int]:
    return {"current_step": step}


def step_from_state(state: Mapping[str, object]) -> int:
    """The saved step counter; a missing key means a fresh run (0)."""
    value = state.get("current_step", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CorruptStateError("budget state", f"current_step must be an integer >= 0: {value!r}")
    return value
