"""Indexed fan-out: results by index whatever the completion order; one failure cancels all."""

from __future__ import annotations

import anyio
import pytest

from skillopt.concurrency import gather_indexed


async def test_results_are_placed_by_index_not_by_completion() -> None:
    finished: list[int] = []
    gates = [anyio.Event() for _ in range(4)]

    async def call(index: int) -> str:
        if index < 3:
            await gates[index + 1].wait()  # 3 finishes first, then 2, 1, 0
        finished.append(index)
        gates[index].set()
        return f"r{index}"

    assert await gather_indexed(call, 4) == ["r0", "r1", "r2", "r3"]
    assert finished == [3, 2, 1, 0]


async def test_calls_run_concurrently() -> None:
    started = 0
    all_started = anyio.Event()

    async def call(index: int) -> int:
        nonlocal started
        started += 1
        if started == 5:
            all_started.set()
        await all_started.wait()  # would hang if the calls ran one after another
        return index

    with anyio.fail_after(30):  # generous: sequential calls would never finish
        assert await gather_indexed(call, 5) == [0, 1, 2, 3, 4]


async def test_a_failure_cancels_the_others_and_propagates() -> None:
    cancelled = anyio.Event()

    async def call(index: int) -> int:
        if index == 0:
            try:
                await anyio.sleep_forever()
            finally:
                cancelled.set()
        raise ValueError("boom")

    with pytest.raises(ExceptionGroup) as info:
        await gather_indexed(call, 2)
    assert info.group_contains(ValueError, match="boom")
    assert cancelled.is_set()


async def test_nothing_to_do() -> None:
    async def call(index: int) -> int:
        raise AssertionError("never called")

    assert await gather_indexed(call, 0) == []
