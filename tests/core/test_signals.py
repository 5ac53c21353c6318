"""Signals reach the event loop where the OS delivers them; on Windows (asyncio cannot
receive them there) the receiver never yields instead of failing the command at start."""

from __future__ import annotations

import os
import signal

import anyio
import pytest

from skillopt.signals import receives_signals, signal_receiver
from skillopt_sleep.shutdown import GracefulStop


def test_which_platforms_deliver_signals() -> None:
    assert receives_signals("linux") and receives_signals("darwin")
    assert not receives_signals("win32")


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="a POSIX signal")
async def test_a_posix_signal_is_received() -> None:
    with signal_receiver(signal.SIGUSR1, platform="linux") as received:
        os.kill(os.getpid(), signal.SIGUSR1)
        async for signum in received:
            assert signum == signal.SIGUSR1
            break


async def test_on_windows_the_receiver_waits_and_a_night_still_starts() -> None:
    stop = GracefulStop("night")
    async with anyio.create_task_group() as tg:
        # What a night does first; on Windows anyio's own receiver would raise here.
        await tg.start(lambda **kw: stop.watch_signals(signal.SIGTERM, platform="win32", **kw))
        with signal_receiver(signal.SIGTERM, platform="win32") as received:
            with anyio.CancelScope() as scope:
                scope.cancel()
                async for _ in received:
                    pytest.fail("nothing can be received")
        assert not stop.stopping
        tg.cancel_scope.cancel()
