"""The trainer's seam to the shared gate and edit-budget schedule (``skillopt.gate``,
``skillopt.optimizer.budget``): the loop's own vocabulary over the core's pure functions."""

from __future__ import annotations

from dataclasses import dataclass

from skillopt.gate import decide_trainer
from skillopt.optimizer.budget import BudgetSchedule, ScheduleKind, edit_budget
from skillopt.trainer.config import LrScheduler
from skillopt.types import GateAction, GateDecision

__all__ = ["GateOutcome", "decide", "paired_outcome", "scheduled_budget"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GateOutcome:
    action: GateAction
    becomes_current: bool
    becomes_best: bool
    decision: GateDecision


def decide(*, candidate: float, current: float, best: float, use_gate: bool) -> GateOutcome:
    """Strict improvement only (ties reject): above current and best -> new best; above
    current only -> accept. With the gate off the candidate is forced in and becomes best
    only on a strict improvement over best."""
    decision = decide_trainer(current, best, candidate, use_gate=use_gate)
    return GateOutcome(
        action=decision.action,
        becomes_current=decision.accepted,
        becomes_best=bool(decision.arithmetic.get("new_best")),
        decision=decision,
    )


def paired_outcome(decision: GateDecision) -> GateOutcome:
    """A paired decision in the loop's terms: a pass is significantly better than the skill
    in place, which is at least as good as the best (or the final promotion settles it), so
    it becomes current and best; anything else (no significant gain, a regressed item, an
    untested candidate) is a reject."""
    accepted = decision.accepted
    return GateOutcome(
        action=GateAction.ACCEPT_NEW_BEST if accepted else GateAction.REJECT,
        becomes_current=accepted,
        becomes_best=accepted,
        decision=decision,
    )


def scheduled_budget(
    mode: LrScheduler, *, max_edits: int, min_edits: int, step: int, total_steps: int
) -> int:
    """Edits allowed at 1-based ``step`` (constant, linear or cosine decay from max to min)."""
    schedule = BudgetSchedule(
        kind=ScheduleKind(mode.value),
        max_edits=max_edits,
        min_edits=min_edits,
        total_steps=total_steps,
    )
    return edit_budget(step, schedule)
