"""One gate trial of a night (a single edit, the union, a leave-one-out, the final check),
as the run directory (``trials.json``) and the report record it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skillopt.types import EditRecord, GateAction, GateDecision

__all__ = ["HARMFUL_EARLIER", "Trial"]

# the note of a single not run because earlier singles found its rule significantly worse
# tonight (see :mod:`.crossfit`): a rejection, not an untested edit
HARMFUL_EARLIER = "rejected without a test: two singles found it significantly worse tonight"


@dataclass(kw_only=True)
class Trial:
    """One gate trial as the run directory and the report record it."""

    name: str
    kind: str  # single | union | leave_one_out | final
    round: int
    target: str
    edits: list[EditRecord]
    applied: list[EditRecord]
    unmatched: list[EditRecord]
    decision: GateDecision | None = None
    note: str = ""
    fold: int | None = None
    motivated_by: list[str] = field(default_factory=list)  # failing tasks its reflection saw
    seen: list[str] = field(default_factory=list)  # every task its reflection saw

    @property
    def verdict(self) -> str:
        if self.decision is None:
            if self.note == HARMFUL_EARLIER:
                return "rejected"
            return "unmatched" if not self.applied else "not_run"
        action = self.decision.action
        if action is GateAction.UNTESTED:
            return "untested"
        return "accepted" if self.decision.accepted else "rejected"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "round": self.round,
            "target": self.target,
            "fold": self.fold,
            "verdict": self.verdict,
            "edits": [e.to_dict() for e in self.edits],
            "applied": [e.to_dict() for e in self.applied],
            "unmatched": [e.to_dict() for e in self.unmatched],
            "motivated_by": self.motivated_by,
            "seen": self.seen,
            "decision": self.decision.to_dict() if self.decision else None,
            "note": self.note,
        }
