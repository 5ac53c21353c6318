"""Indexed concurrent fan-out: every call in one task group, results by index.

Results are placed by the index they were asked for, never by completion order, so what a
caller builds from them depends only on the replies. Concurrency is bounded by whatever the
calls wait on (the backend pool's limits), not here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

import anyio

__all__ = ["gather_indexed"]

T = TypeVar("T")

_MISSING = object()


async def gather_indexed(fn: Callable[[int], Awaitable[T]], n: int) -> list[T]:
    """``[await fn(0), ..., await fn(n - 1)]`` with the calls running concurrently.

    A call that raises cancels the others; the error propagates from the task group (as an
    exception group, like any task group's)."""
    results: list[object] = [_MISSING] * n

    async def one(index: int) -> None:
        results[index] = await fn(index)

    async with anyio.create_task_group() as tg:
        for index in range(n):
            tg.start_soon(one, index)
    return cast(list[T], results)
