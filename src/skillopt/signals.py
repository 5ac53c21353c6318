"""Process signals for an event loop, where the OS can deliver them there.

asyncio cannot receive signals on Windows (``anyio.open_signal_receiver`` raises
``NotImplementedError``), so a night that watched for SIGTERM could not start at all.
There Ctrl-C still raises ``KeyboardInterrupt`` (the night then ends as interrupted), and
Task Scheduler or ``taskkill`` end a process without a signal to catch: the receiver simply
never yields. The platform is a parameter (default: this machine's) for the tests.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import anyio

__all__ = ["receives_signals", "signal_receiver"]


def receives_signals(platform: str | None = None) -> bool:
    return not (platform or sys.platform).startswith("win")


async def _never() -> AsyncIterator[signal.Signals]:
    await anyio.sleep_forever()
    yield signal.SIGTERM  # pragma: no cover - never reached


@contextmanager
def signal_receiver(
    *signals: signal.Signals, platform: str | None = None
) -> Iterator[AsyncIterator[signal.Signals]]:
    """``anyio.open_signal_receiver(*signals)`` where signals reach the loop; elsewhere an
    iterator that waits forever."""
    if receives_signals(platform):
        with anyio.open_signal_receiver(*signals) as received:
            yield received
    else:
        yield _never()
