"""GracefulStop in-process: drain then cancel, the grace period, and the immediate stop."""

from __future__ import annotations

import os
import signal
import sys

import anyio
import pytest

from skillopt_sleep.shutdown import Drain, GracefulStop


async def _cancelled_after(stop: GracefulStop, drain: Drain | None, grace: float) -> float:
    """Seconds until ``cancel_after_drain`` cancelled a night that never ends by itself.

    A stop that waited out a 600 s grace fails on the 60 s guard; no test times the machine.
    """
    started = anyio.current_time()
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.sleep_forever)  # the night
            stop.request()
            await stop.cancel_after_drain(tg.cancel_scope, drain=drain, grace=grace)
    return anyio.current_time() - started


async def test_a_finished_drain_cancels_before_the_grace_period_ends() -> None:
    drained = anyio.Event()

    async def drain() -> None:
        await anyio.sleep(0.05)
        drained.set()

    await _cancelled_after(GracefulStop("t"), drain, grace=600)
    assert drained.is_set()


async def test_without_a_drain_the_night_gets_the_whole_grace_period() -> None:
    assert await _cancelled_after(GracefulStop("t"), None, grace=0.2) >= 0.2


async def test_an_immediate_request_skips_the_wait() -> None:
    stop = GracefulStop("t")

    async def never() -> None:
        await anyio.sleep_forever()

    took: list[float] = []

    async def night() -> None:
        took.append(await _cancelled_after(stop, never, grace=600))

    async with anyio.create_task_group() as outer:
        outer.start_soon(night)
        await anyio.wait_all_tasks_blocked()
        stop.request(immediate=True)
    assert took  # cancelled before the 60 s guard, not after the 600 s grace


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
async def test_the_second_signal_is_an_immediate_request() -> None:
    stop = GracefulStop("t")
    async with anyio.create_task_group() as tg:
        await tg.start(stop.watch_signals, signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR1)
        await stop.requested.wait()
        night = anyio.Event()

        async def cancel() -> None:
            async with anyio.create_task_group() as inner:
                inner.start_soon(anyio.sleep_forever)
                await stop.cancel_after_drain(inner.cancel_scope, drain=None, grace=600)
            night.set()

        tg.start_soon(cancel)
        os.kill(os.getpid(), signal.SIGUSR1)
        with anyio.fail_after(60):  # at once, not after the 600 s grace
            await night.wait()
        tg.cancel_scope.cancel()
