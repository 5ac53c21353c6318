"""Which sessions are mined as one, and how many of them share a mining call.

1. :func:`group_by_request` puts the sessions whose opening requests are the same request
   (the heuristic miner's task id of it: case, punctuation and pasted secrets aside) into
   one :class:`RequestGroup`. A group is one entry of a mining prompt; what the model finds
   in it is attributed to every session of the group. A session with no opening request
   (only greetings or one-word messages) is a group of its own.
2. :func:`pack` fills calls in order, each with as many items as fit in a token bound
   (what every call carries, plus each item's cost); an item over the bound on its own
   gets a call of its own rather than being dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from skillopt_sleep.harvest import SessionDigest
from skillopt_sleep.mining.heuristic import request_key

__all__ = ["RequestGroup", "group_by_request", "pack"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RequestGroup:
    """Sessions that opened with the same request, newest first (``sessions[0]`` leads)."""

    sessions: tuple[SessionDigest, ...]

    @property
    def newest(self) -> SessionDigest:
        return self.sessions[0]


def group_by_request(digests: Sequence[SessionDigest]) -> list[RequestGroup]:
    """``digests`` (newest first) grouped by opening request, in order of their newest session."""
    by_key: dict[str, list[SessionDigest]] = {}
    order: list[str | SessionDigest] = []
    for digest in digests:
        key = request_key(digest)
        if key is None:
            order.append(digest)
        elif key in by_key:
            by_key[key].append(digest)
        else:
            by_key[key] = [digest]
            order.append(key)
    return [
        RequestGroup(tuple(by_key[item]) if isinstance(item, str) else (item,)) for item in order
    ]


def pack(items: Sequence[T], *, cost: Callable[[T], int], fixed: int, bound: int) -> list[list[T]]:
    """``items`` in order, cut into runs whose ``fixed + sum(cost)`` stays within ``bound``."""
    calls: list[list[T]] = []
    current: list[T] = []
    used = fixed
    for item in items:
        need = cost(item)
        if current and used + need > bound:
            calls.append(current)
            current, used = [], fixed
        current.append(item)
        used += need
    if current:
        calls.append(current)
    return calls
