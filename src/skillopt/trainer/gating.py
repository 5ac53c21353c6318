"""The trainer's use of the gate and the edit-budget schedule (pure functions).

Kept in one small module so the loop has a single seam to the shared core
(``skillopt.gate`` / ``skillopt.optimizer.budget``) as those land.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from skillopt.trainer.config import GateMetric, LrScheduler
from skillopt.types import GateAction

__all__ = ["GateOutcome", "decide", "gate_score", "scheduled_budget"]


def gate_score(hard: float, soft: float, metric: GateMetric, mixed_weight: float) -> float:
    if metric is GateMetric.HARD:
        return hard
    if metric is GateMetric.SOFT:
        return soft
    w = min(1.0, max(0.0, mixed_weight))
    return (1.0 - w) * hard + w * soft


@dataclass(frozen=True, slots=True, kw_only=True)
class GateOutcome:
    action: GateAction
    becomes_current: bool
    becomes_best: bool


def decide(*, candidate: float, current: float, best: float, use_gate: bool) -> GateOutcome:
    """Strict improvement only (ties reject): above current and best -> new best; above
    current only -> accept. With the gate off the candidate is forced in and becomes best
    only on a strict improvement over best."""
    if not use_gate:
        return GateOutcome(
            action=GateAction.FORCE_ACCEPT, becomes_current=True, becomes_best=candidate > best
        )
    if candidate > current and candidate > best:
        return GateOutcome(
            action=GateAction.ACCEPT_NEW_BEST, becomes_current=True, becomes_best=True
        )
    if candidate > current:
        return GateOutcome(action=GateAction.ACCEPT, becomes_current=True, becomes_best=False)
    return GateOutcome(action=GateAction.REJECT, becomes_current=False, becomes_best=False)


def scheduled_budget(
    mode: LrScheduler, *, max_edits: int, min_edits: int, step: int, total_steps: int
) -> int:
    """Edits allowed at 1-based ``step``: constant, linear or cosine decay from max to min,
    Python rounding (half to even), floored at min; step 1 is already decayed."""
    if mode is LrScheduler.CONSTANT or total_steps <= 1:
        return max_edits
    t = min(step, total_steps) / total_steps
    if mode is LrScheduler.LINEAR:
        value = max_edits + (min_edits - max_edits) * t
    else:
        value = min_edits + (max_edits - min_edits) * (1 + math.cos(math.pi * t)) / 2
    return max(min_edits, round(value))
