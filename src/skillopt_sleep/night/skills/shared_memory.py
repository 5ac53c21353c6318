"""What the shared memory step did (:class:`SharedMemory`, the report's ``shared_memory``):
its own module, so :mod:`.fanout` (which holds it) and :mod:`.shared` (which fills it) need
not import each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skillopt.types import EditRecord, RolloutResult
from skillopt_sleep.night_end import PartStatus

__all__ = ["SharedMemory"]


@dataclass(kw_only=True)
class SharedMemory:
    """What the shared step did (the report's ``shared_memory``)."""

    status: PartStatus = PartStatus.NOT_NEEDED  # accepted|rejected|no_edits|failed|budget_reached
    reason: str = ""
    groups: list[str] = field(default_factory=list)  # the groups whose tasks it measured
    helped: list[str] = field(default_factory=list)  # groups with a task it improved
    edits: list[EditRecord] = field(default_factory=list)
    memory: str = ""  # the memory every group's night starts from
    start_scores: dict[str, float] = field(default_factory=dict)  # per task, live documents
    baseline: float | None = None
    candidate: float | None = None
    calls: int = 0
    answers: dict[str, RolloutResult] = field(default_factory=dict)  # by job key

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "reason": self.reason,
            "groups": [g or "managed" for g in self.groups],
            "helped": [g or "managed" for g in self.helped],
            "accepted_edits": [e.content for e in self.edits],
            "baseline": self.baseline,
            "candidate": self.candidate,
            "calls": self.calls,
        }
