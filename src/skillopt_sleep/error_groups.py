"""Failed rollout and judge calls, grouped by what went wrong rather than by message.

Messages carry details that differ call by call ("next probe in 29.4s", a request id), so
counting by message shows one cause as many. A group is (member, stage, error class); it
keeps a count and the first message as an example. ``member`` is empty when no member was
reached (every circuit open); ``stage`` is the job's phase (``baseline``, ``rollout``,
``trial``, ...) with ``.judge`` appended when judging the answer failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_GROUPS", "ErrorGroups", "error_class"]

MAX_GROUPS = 20


def error_class(exc: BaseException) -> str:
    """A short stable label: the error's own class label, else its type name."""
    label = getattr(exc, "error_class", None)
    return str(label) if label else type(exc).__name__


@dataclass(slots=True)
class _Group:
    count: int
    example: str


@dataclass(slots=True)
class ErrorGroups:
    """A tally of failures keyed by (member, stage, error class)."""

    _groups: dict[tuple[str, str, str], _Group] = field(default_factory=dict)

    def add(self, *, member: str, stage: str, error_class: str, message: str) -> None:
        key = (member, stage, error_class)
        group = self._groups.get(key)
        if group is None:
            self._groups[key] = _Group(count=1, example=message)
        else:
            group.count += 1

    def to_list(self) -> list[dict[str, Any]]:
        """The largest groups first, at most :data:`MAX_GROUPS`."""
        ordered = sorted(self._groups.items(), key=lambda item: (-item[1].count, item[0]))
        return [
            {"member": m, "stage": s, "error_class": c, "count": g.count, "example": g.example}
            for (m, s, c), g in ordered[:MAX_GROUPS]
        ]
