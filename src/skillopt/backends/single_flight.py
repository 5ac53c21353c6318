"""Single-flight: identical requests in flight at the same time share one call.

The pool keys a request by its cache key (role, model, the whole request text, the sample
id, the output cap and JSON mode), so only requests the response cache would answer with
the same reply a moment later are merged: a follower gets what the cache would have given
it had it arrived after the leader finished. Distinct samples (another ``sample_id``) have
another key and are never merged. If the leader fails or is cancelled, its followers make
their own calls, so a failure is never shared and nobody waits on a call that is gone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import anyio

from skillopt.backends.base import Completion

__all__ = ["Flight", "SingleFlight"]


@dataclass(slots=True)
class Flight:
    """One call in flight; ``result`` is set by its leader when the call succeeds."""

    done: anyio.Event = field(default_factory=anyio.Event)
    result: Completion | None = None


class SingleFlight:
    """The calls in flight, by key."""

    def __init__(self) -> None:
        self._flights: dict[str, Flight] = {}

    def __len__(self) -> int:
        return len(self._flights)

    async def shared(self, key: str) -> Completion | None:
        """The reply of the call in flight for ``key``, once it lands; ``None`` when no
        such call is in flight, or it failed or was cancelled."""
        flight = self._flights.get(key)
        if flight is None:
            return None
        await flight.done.wait()
        return flight.result

    @contextlib.contextmanager
    def leading(self, key: str) -> Iterator[Flight]:
        """Register the caller's call for ``key`` (unless another already leads it: then
        the caller's call simply runs alone); followers wake when the block exits."""
        flight = Flight()
        mine = self._flights.setdefault(key, flight) is flight
        try:
            yield flight
        finally:
            if mine:
                del self._flights[key]
            flight.done.set()
