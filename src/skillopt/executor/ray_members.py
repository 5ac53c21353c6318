"""Agent CLI pool members whose calls run as Ray tasks (the night's replay, on opt-in).

A night's rollouts are pool calls, so the unit sent to Ray is one call of an agent CLI
member: the worker builds the member from its config, makes the call (the CLI process runs
there, against the member's own endpoint) and closes it. The pool around it stays in this
process: its member limiter holds a slot while the task runs, its retries see the same
error classes (with ``status`` and ``retry_after``), and its cache, breaker and accounting
are unchanged. HTTP members gain nothing from Ray (a call is a wait on the network) and
stay local. :func:`skillopt.backends.open.open_completer` opens these members when a night's
executor is Ray's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from skillopt.backends.base import Backend, Completion, CompletionRequest
from skillopt.executor.ray_exec import RayExecutor, open_ray_executor

if TYPE_CHECKING:
    from skillopt.config import (
        ClaudeCliMember,
        CodexCliMember,
        CopilotCliMember,
        MemberConfig,
        PoolConfig,
    )
    from skillopt.executor.settings import ExecutorSettings

    CliMember = ClaudeCliMember | CodexCliMember | CopilotCliMember

__all__ = ["RayMember", "complete_on_worker", "open_ray_members"]


class _NoRelay:
    """A member call needs no model calls of the driver's."""

    async def complete(self, request: CompletionRequest) -> Completion:
        raise RuntimeError("a member call made on a worker does not relay calls")


async def complete_on_worker(
    _relay: object, member: MemberConfig, request: CompletionRequest
) -> Completion:
    """One call of ``member``, built and closed on this worker."""
    from skillopt.backends.factory import build_member

    backend = build_member(member)
    try:
        return await backend.complete(request)
    finally:
        await backend.aclose()


class RayMember:
    """A pool member (:class:`~skillopt.backends.base.Backend`) that runs each call on Ray."""

    def __init__(self, member: CliMember, executor: RayExecutor) -> None:
        self._member = member
        self._executor = executor

    @property
    def name(self) -> str:
        return self._member.name

    @property
    def model(self) -> str:
        return self._member.model or self._member.kind

    async def complete(self, request: CompletionRequest) -> Completion:
        done = await self._executor.call(
            complete_on_worker, self._member, request, completer=_NoRelay()
        )
        if not isinstance(done, Completion):
            raise TypeError(f"a remote member call returned {type(done).__name__}")
        return done

    async def aclose(self) -> None:
        return None


@asynccontextmanager
async def open_ray_members(
    pool: PoolConfig, settings: ExecutorSettings
) -> AsyncIterator[dict[str, Backend]]:
    """Every agent CLI member of ``pool`` by name, as a :class:`RayMember`."""
    from skillopt.config import ClaudeCliMember, CodexCliMember, CopilotCliMember

    cli = (ClaudeCliMember, CodexCliMember, CopilotCliMember)
    async with open_ray_executor(settings) as executor:
        yield {m.name: RayMember(m, executor) for m in pool.members if isinstance(m, cli)}
