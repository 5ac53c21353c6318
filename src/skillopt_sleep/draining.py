"""A backend-pool wrapper a stop can drain: no new model call, the ones in flight finish.

SIGTERM (a systemd stop, the daemon's shutdown) calls :meth:`DrainingPool.drain`: new
calls then wait until their night is cancelled, while calls already in flight complete.

Calls queue here, per role, up to the role's total concurrency, rather than inside the
backend pool, so "in flight" means handed to the pool's members: when roles share members,
at most one more round of the endpoints' capacity goes out after the stop.
"""

from __future__ import annotations

from typing import Any

import anyio

from skillopt.backends.base import Completion, CompletionRequest, Role
from skillopt_sleep.spend import ModelPool


class DrainingPool:
    """Forwards to ``pool`` until :meth:`drain`; see the module docstring."""

    def __init__(self, pool: ModelPool) -> None:
        self.pool = pool
        self._limiters: dict[Role, anyio.CapacityLimiter] = {}
        self._in_flight = 0
        self._draining = False
        self._idle = anyio.Event()

    def _limiter(self, role: Role) -> anyio.CapacityLimiter:
        limiter = self._limiters.get(role)
        if limiter is None:
            limiter = anyio.CapacityLimiter(max(1, self.pool.total_concurrency(role)))
            self._limiters[role] = limiter
        return limiter

    async def complete(self, request: CompletionRequest) -> Completion:
        async with self._limiter(request.role):
            if self._draining:
                await anyio.sleep_forever()  # no new work after a stop; cancelled with the night
            self._in_flight += 1
            try:
                return await self.pool.complete(request)
            finally:
                self._in_flight -= 1
                if self._draining and not self._in_flight:
                    self._idle.set()

    def accounting(self) -> dict[str, Any]:
        return self.pool.accounting()

    def total_concurrency(self, role: Role) -> int:
        return self.pool.total_concurrency(role)

    async def drain(self) -> None:
        """Refuse new calls; return once none is in flight."""
        self._draining = True
        if not self._in_flight:
            self._idle.set()
        await self._idle.wait()
