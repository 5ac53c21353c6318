"""The pool's per-member circuit breaker: open after consecutive failures, then one probe.

A member that keeps failing is left alone for a cool-down instead of being called (and
failing) again; after it, exactly one call probes it, and its outcome closes or reopens
the circuit. The pool (:mod:`skillopt.backends.pool`) owns one :class:`Breaker` per member.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Breaker", "BreakerPolicy", "BreakerState"]


@dataclass(frozen=True, kw_only=True)
class BreakerPolicy:
    """Open a member after ``failure_threshold`` consecutive failures for ``cooldown`` s.

    When every member of a role is open, an attempt waits up to ``max_wait`` seconds for
    one to admit calls again (cool-down over, or a probe succeeded) before raising
    ``NoHealthyMemberError``; 0 fails at once. A :class:`~.patience.Patience` in effect
    (a night sets one) replaces ``max_wait`` with its own budget. Only callers already
    holding a gate slot wait, so a long queue behind them costs nothing.
    """

    failure_threshold: int = 5
    cooldown: float = 30.0
    max_wait: float = 0.0


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Breaker:
    """Per-member circuit breaker. After the cool-down exactly one probe call is let through."""

    def __init__(self, policy: BreakerPolicy) -> None:
        self._policy = policy
        self._failures = 0
        self._opened_at: float | None = None
        self._probing = False
        self.times_opened = 0

    def state(self, now: float) -> BreakerState:
        if self._opened_at is None:
            return BreakerState.CLOSED
        if now - self._opened_at >= self._policy.cooldown:
            return BreakerState.HALF_OPEN
        return BreakerState.OPEN

    def admits(self, now: float) -> bool:
        state = self.state(now)
        if state is BreakerState.CLOSED:
            return True
        return state is BreakerState.HALF_OPEN and not self._probing

    def reopens_at(self) -> float | None:
        return None if self._opened_at is None else self._opened_at + self._policy.cooldown

    def on_start(self, now: float) -> bool:
        """Register a call start; returns True when this call is the half-open probe."""
        if self.state(now) is BreakerState.HALF_OPEN:
            self._probing = True
            return True
        return False

    def on_success(self) -> bool:
        """Count a success; returns True when this closed an open circuit."""
        was_open = self._opened_at is not None
        self._failures = 0
        self._opened_at = None
        self._probing = False
        return was_open

    def on_failure(self, now: float) -> bool:
        """Count a failure; returns True when this failure (re)opened the circuit."""
        self._failures += 1
        was_probe = self._probing
        self._probing = False
        if was_probe or (
            self._opened_at is None and self._failures >= self._policy.failure_threshold
        ):
            self._opened_at = now
            self.times_opened += 1
            return True
        return False

    def on_abandon(self) -> bool:
        """The call was cancelled or failed for a reason that says nothing about the member.

        Returns True when that frees the half-open probe slot for another call.
        """
        was_probe = self._probing
        self._probing = False
        return was_probe
