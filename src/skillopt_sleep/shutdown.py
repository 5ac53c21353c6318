"""One way to stop nights on a signal: drain, then cancel; a second signal cancels at once.

``once`` and the daemon both stop through a :class:`GracefulStop`. The first request stops
new model calls (the stack's ``drain``) and gives the calls in flight up to ``grace``
seconds to finish; then the nights are cancelled, and their own finalizers mark each run
aborted and resumable. A second request (a second SIGTERM, or Ctrl-C after it) skips the
rest of the wait.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskStatus

from skillopt.logging import get_logger
from skillopt.signals import signal_receiver

__all__ = ["Drain", "GracefulStop"]

_log = get_logger(__name__)

Drain = Callable[[], Awaitable[None]]
"""Refuses new model calls and returns once none is in flight."""


class GracefulStop:
    """A stop that drains first. ``name`` prefixes the log event (``<name>.signal``)."""

    def __init__(self, name: str) -> None:
        self._event = f"{name}.signal"
        self.requested = anyio.Event()
        self._immediate = anyio.Event()

    @property
    def stopping(self) -> bool:
        return self.requested.is_set()

    def request(self, *, immediate: bool = False) -> None:
        """Ask to stop; ``immediate`` cancels without waiting (any more) for the drain."""
        if immediate:
            self._immediate.set()
        self.requested.set()

    async def watch_signals(
        self,
        *signals: signal.Signals,
        platform: str | None = None,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Turn the first of ``signals`` into a :meth:`request`, any later one into an
        immediate one (run it in a task group). Where the OS cannot deliver signals to the
        loop (Windows) nothing is watched (:mod:`skillopt.signals`)."""
        with signal_receiver(*signals, platform=platform) as received:
            task_status.started()
            async for signum in received:
                again = self.stopping
                _log.warning(
                    self._event,
                    signal=signal.Signals(signum).name,
                    action="cancel now" if again else "drain, then cancel",
                )
                self.request(immediate=again)

    async def cancel_after_drain(
        self, scope: anyio.CancelScope, *, drain: Drain | None, grace: float
    ) -> None:
        """Wait until ``drain`` returns, ``grace`` seconds pass or a second request comes,
        then cancel ``scope``. Without ``drain`` (nothing can be drained) the work keeps
        running until the grace period is over or it ends by itself."""
        with anyio.move_on_after(grace):
            async with anyio.create_task_group() as waits:

                async def drained() -> None:
                    if drain is not None:
                        await drain()
                        waits.cancel_scope.cancel()

                async def immediate() -> None:
                    await self._immediate.wait()
                    waits.cancel_scope.cancel()

                waits.start_soon(drained)
                waits.start_soon(immediate)
        scope.cancel()
