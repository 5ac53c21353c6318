"""Open the model-call stack every entry point uses: the backend pool and its wrappers.

A night (``run_night``), ``once``, the daemon, ``harvest`` and the trainer all build their
stack here, so what every request passes through is decided in one place::

    CompleterStack
      DrainingCompleter     only when opened ``drainable``: a stop lets calls in flight finish
        RedactingCompleter  every outbound text redacted (the one place that guarantees it)
          BackendPool       members, retries, failover, limits, cache

Concurrency is bounded by the pool alone; the drain wrapper queues up to the same bound.
A night puts its per-night budget (:class:`~skillopt.backends.wrappers.BudgetCompleter`)
on top of the stack it is given. With ``executor`` of kind ``ray`` (``[night.executor]``),
the pool's agent CLI members run each call as a Ray task
(:mod:`skillopt.executor.ray_members`); the pool itself, its limits and accounting stay here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio

from skillopt.backends.base import Backend
from skillopt.backends.pool import BackendPool
from skillopt.backends.wrappers import DrainingCompleter, PoolWrapper, RedactingCompleter

if TYPE_CHECKING:
    from skillopt.config import PoolConfig
    from skillopt.executor.settings import ExecutorSettings

__all__ = ["CLOSE_TIMEOUT", "CompleterStack", "open_completer"]

CLOSE_TIMEOUT = 10.0  # seconds closing the members may take, even while being cancelled


class CompleterStack(PoolWrapper):
    """What :func:`open_completer` yields: use it as the pool; :meth:`drain` on a stop."""

    def __init__(self, pool: BackendPool, *, drainable: bool = False) -> None:
        self.pool = pool
        redacting = RedactingCompleter(pool)
        self._drain = DrainingCompleter(redacting) if drainable else None
        super().__init__(self._drain or redacting)

    async def drain(self) -> None:
        """Start no new call and return once the calls in flight have finished (at once
        for a stack not opened ``drainable``: there is nothing to wait for)."""
        if self._drain is not None:
            await self._drain.drain()


@asynccontextmanager
async def open_completer(
    source: PoolConfig | BackendPool,
    *,
    drainable: bool = False,
    executor: ExecutorSettings | None = None,
) -> AsyncIterator[CompleterStack]:
    """The stack over the pool ``source`` describes (or is); the pool is closed on exit.

    ``source`` is a pool config (members are built here) or a pool already built from
    members the caller made (the trainer's offline world model). Missing environment
    variables or member kinds raise :class:`~skillopt.errors.ConfigError` before any call.
    ``executor`` (a night's ``[night.executor]``) of kind ``ray`` puts the config's agent
    CLI members on Ray; ``None`` or ``local`` runs every call in this process.
    """
    async with _remote_members(source, executor) as remote:
        pool = (
            source
            if isinstance(source, BackendPool)
            else BackendPool.from_config(source, extra_backends=remote)
        )
        try:
            yield CompleterStack(pool, drainable=drainable)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT):
                await pool.aclose()


@asynccontextmanager
async def _remote_members(
    source: PoolConfig | BackendPool, executor: ExecutorSettings | None
) -> AsyncIterator[Mapping[str, Backend] | None]:
    """The members that run elsewhere, by name (none unless ``executor`` is Ray's)."""
    if executor is None or executor.kind != "ray":
        yield None
        return
    if isinstance(source, BackendPool):
        raise TypeError("members run on Ray are built from a pool config, not a built pool")
    from skillopt.executor.ray_members import open_ray_members

    async with open_ray_members(source, executor) as remote:
        yield remote
