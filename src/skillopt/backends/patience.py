"""How long, in all, calls may wait for a role whose every member has an open circuit.

A transient fault storm can open every circuit of a role at once; a call that then fails at
once fails its stage, and the night with it. With a :class:`Patience` in effect (set per
night with :func:`patience_for`; a context variable, so the nights of one daemon sharing a
pool each have their own), the pool's callers wait for the earliest half-open probe
instead, until the patience is spent. It is spent by wall-clock time during which at least
one caller waits, so a hundred callers waiting together for ten seconds spend ten seconds.

A night run from the terminal does not wait when every member *refused the connection*
(``wait_when_refused=False``): nothing listens there, a stopped server is not a storm, and
the user is better told at once than after ten minutes. The daemon keeps waiting.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import anyio

__all__ = ["Patience", "current_patience", "patience_for"]


class Patience:
    """A budget of seconds spent waiting for recovery, shared by every caller that waits."""

    def __init__(self, seconds: float, *, wait_when_refused: bool = True) -> None:
        self.budget = max(0.0, seconds)
        self.wait_when_refused = wait_when_refused
        self._spent = 0.0
        self._waiting = 0
        self._since = 0.0
        self.episodes = 0  # how many times callers started waiting (all open, again)

    def spent(self, now: float | None = None) -> float:
        if not self._waiting:
            return self._spent
        return self._spent + ((anyio.current_time() if now is None else now) - self._since)

    def remaining(self, now: float) -> float:
        return max(0.0, self.budget - self.spent(now))

    @contextmanager
    def waiting(self) -> Iterator[bool]:
        """While inside, time counts against the budget; yields True for the first waiter
        of an episode (who says so in the log)."""
        first = not self._waiting
        if first:
            self._since = anyio.current_time()
            self.episodes += 1
        self._waiting += 1
        try:
            yield first
        finally:
            self._waiting -= 1
            if not self._waiting:
                self._spent += anyio.current_time() - self._since

    def to_dict(self) -> dict[str, float | int]:
        return {
            "budget_seconds": self.budget,
            "waited_seconds": round(self.spent(), 3),
            "episodes": self.episodes,
        }


_CURRENT: ContextVar[Patience | None] = ContextVar("skillopt_patience", default=None)


def current_patience() -> Patience | None:
    """The patience in effect for this task (``None``: the pool's own ``max_wait``)."""
    return _CURRENT.get()


@contextmanager
def patience_for(patience: Patience) -> Iterator[Patience]:
    """Put ``patience`` in effect for this task and the tasks it starts."""
    token = _CURRENT.set(patience)
    try:
        yield patience
    finally:
        _CURRENT.reset(token)
