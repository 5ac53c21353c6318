"""One gate trial of a night (a single edit, the union, a leave-one-out, the final check),
as the run directory (``trials.json``) and the report record it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from skillopt.types import EditRecord, GateAction, GateDecision

__all__ = [
    "HARMFUL_EARLIER",
    "SPOILED_EARLIER",
    "SUSPECTED_EARLIER",
    "Trial",
    "Verdict",
    "harm_key",
]

# the note of a single not run because earlier singles found its rule significantly worse
# tonight (see :mod:`.crossfit`): a rejection, not an untested edit
HARMFUL_EARLIER = "rejected without a test: two singles found it significantly worse tonight"
# ... and of one an attribution or masking test dropped tonight for cancelling what other
# edits gained (see :mod:`.spoilers`)
SPOILED_EARLIER = "rejected without a test: earlier tonight it cancelled what other edits gained"
# ... and of one dropped this round as a union's likeliest spoiler (see :mod:`.spoilers`)
SUSPECTED_EARLIER = "rejected without a test: dropped this round as a union's likeliest spoiler"


def harm_key(edit: EditRecord) -> tuple[str, str, str]:
    """What makes two proposals the same rule for :data:`HARMFUL_EARLIER` and
    :data:`SPOILED_EARLIER`, whichever document they target: a rule that made answers
    worse in the skill does in the memory."""
    return (edit.op, edit.content.strip(), edit.anchor.strip())


class Verdict(StrEnum):
    """What one trial found (``trials.json``: ``verdict``)."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    UNTESTED = "untested"  # nothing held out exercised it: carried, not rejected
    UNMATCHED = "unmatched"  # none of its edits applied to the document
    NOT_RUN = "not_run"


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
    def verdict(self) -> Verdict:
        if self.decision is None:
            if self.note in (HARMFUL_EARLIER, SPOILED_EARLIER, SUSPECTED_EARLIER):
                return Verdict.REJECTED
            return Verdict.UNMATCHED if not self.applied else Verdict.NOT_RUN
        action = self.decision.action
        if action is GateAction.UNTESTED:
            return Verdict.UNTESTED
        return Verdict.ACCEPTED if self.decision.accepted else Verdict.REJECTED

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "round": self.round,
            "target": self.target,
            "fold": self.fold,
            "verdict": self.verdict.value,
            "edits": [e.to_dict() for e in self.edits],
            "applied": [e.to_dict() for e in self.applied],
            "unmatched": [e.to_dict() for e in self.unmatched],
            "motivated_by": self.motivated_by,
            "seen": self.seen,
            "decision": self.decision.to_dict() if self.decision else None,
            "note": self.note,
        }
