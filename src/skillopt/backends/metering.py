"""What the pool tells about the requests it sends: spend meters, a call's usage, what is out.

Every request the pool sends passes :func:`admit` (the request's spend meters may refuse
it: a cap is a cap) and ends in :func:`settle` (its reply's usage, an unusable one's
included, and its failure). :class:`CallUsage` sums what one call's requests used, for the
per-sample costs; :class:`OutRequests` keeps the requests out now, for a live display
that must tell a slow call from a hung one.
"""

from __future__ import annotations

import itertools

from skillopt.backends.base import CompletionRequest, Usage

__all__ = ["CallUsage", "OutRequests", "admit", "settle"]


class CallUsage:
    """A spend meter that sums the usage of every request one call made (unusable replies
    included): the pool puts one on each call, for what the call's Completion reports."""

    __slots__ = ("usage",)

    def __init__(self) -> None:
        self.usage = Usage()

    def opened(self) -> None:
        pass

    def check(self, request: CompletionRequest) -> None:
        pass

    def sent(self, request: CompletionRequest) -> None:
        pass

    def settled(self, *, member: str, usage: Usage | None, error: str) -> None:
        if usage is not None:
            self.usage = self.usage.plus(usage)


def admit(request: CompletionRequest) -> None:
    """Every meter of ``request`` lets it go out (else the refusal propagates, nothing
    counted), then each counts it as sent."""
    for meter in request.meters:
        meter.check(request)
    for meter in request.meters:
        meter.sent(request)


def settle(request: CompletionRequest, *, member: str, usage: Usage | None, error: str) -> None:
    """Tell ``request``'s meters that one of its requests ended."""
    for meter in request.meters:
        meter.settled(member=member, usage=usage, error=error)


class OutRequests:
    """The requests out now: which member each waits on, since when."""

    def __init__(self) -> None:
        self._out: dict[int, tuple[str, float]] = {}
        self._keys = itertools.count()

    def start(self, member: str, now: float) -> int:
        key = next(self._keys)
        self._out[key] = (member, now)
        return key

    def end(self, key: int) -> None:
        del self._out[key]

    def view(self, now: float) -> tuple[int, str, float]:
        """How many are out, the member the oldest waits on, and for how many seconds."""
        if not self._out:
            return 0, "", 0.0
        member, since = min(self._out.values(), key=lambda out: out[1])
        return len(self._out), member, now - since
