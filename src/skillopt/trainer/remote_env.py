"""An environment whose rollouts run as Ray tasks (``[executor] kind = "ray"``).

The wrapper keeps the environment's items on the driver and sends each ``rollout`` to a
worker, which opens the same environment from the same config (with a local executor) and
rolls the item out there. Everything the trainer relies on is unchanged: it still places
results by item index, journals rows and resumes on the driver, and every model call of a
remote rollout is made by the driver's pool (:mod:`skillopt.executor.ray_exec`). An exec
environment's agent CLI (``env.exec_member``) runs on the worker; at most that member's
``max_concurrency`` of its rollouts are in flight at once, as locally.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, nullcontext
from typing import TYPE_CHECKING

import anyio

from skillopt.backends.base import Completer, Completion, CompletionRequest
from skillopt.executor.ray_exec import RayExecutor, open_ray_executor
from skillopt.executor.settings import ExecutorKind, ExecutorSettings
from skillopt.trainer.envs.base import Environment, EnvItem, RolloutContext, RolloutResult, Split

if TYPE_CHECKING:
    from skillopt.trainer.config import TrainerConfig

__all__ = ["RayRolloutEnvironment", "open_ray_environment", "rollout_on_worker"]


class _Unset:
    """Stands in for the driver's completer while a context crosses to a worker."""

    async def complete(self, request: CompletionRequest) -> Completion:
        raise RuntimeError("the relay completer replaces this one on the worker")


async def rollout_on_worker(
    completer: Completer, cfg: TrainerConfig, item: EnvItem, skill: str, ctx: RolloutContext
) -> RolloutResult:
    """One rollout on a Ray worker, in the environment ``cfg`` opens there."""
    from skillopt.trainer.local_env import open_local_environment

    async with open_local_environment(cfg) as env:
        return await env.rollout(item, skill, dataclasses.replace(ctx, completer=completer))


class RayRolloutEnvironment:
    """``env``'s items and task types; its rollouts as Ray tasks."""

    def __init__(
        self, env: Environment, cfg: TrainerConfig, executor: RayExecutor, *, in_flight: int
    ) -> None:
        self._env = env
        self._worker_cfg = cfg.model_copy(
            update={"executor": ExecutorSettings(kind=ExecutorKind.LOCAL)}
        )
        self._executor = executor
        self._limiter = anyio.CapacityLimiter(in_flight) if in_flight else None

    @property
    def name(self) -> str:
        return self._env.name

    def items(self, split: Split) -> Sequence[EnvItem]:
        return self._env.items(split)

    def task_types(self) -> list[str]:
        return self._env.task_types()

    async def rollout(self, item: EnvItem, skill: str, ctx: RolloutContext) -> RolloutResult:
        portable = dataclasses.replace(ctx, completer=_Unset())
        async with self._limiter if self._limiter is not None else nullcontext():
            result = await self._executor.call(
                rollout_on_worker, self._worker_cfg, item, skill, portable, completer=ctx.completer
            )
        if not isinstance(result, RolloutResult):
            raise TypeError(f"a remote rollout returned {type(result).__name__}")
        return result


def _member_limit(cfg: TrainerConfig) -> int:
    """The exec member's ``max_concurrency`` (0 = no exec member: the pool bounds calls)."""
    if not cfg.env.exec_member or not cfg.backend.pool_config:
        return 0
    from skillopt.config import load_pool_config

    return load_pool_config(cfg.backend.pool_config).member(cfg.env.exec_member).max_concurrency


@asynccontextmanager
async def open_ray_environment(cfg: TrainerConfig) -> AsyncIterator[Environment]:
    """The configured environment with its rollouts on Ray (opened locally for its items)."""
    from skillopt.trainer.local_env import open_local_environment

    local = cfg.model_copy(update={"executor": ExecutorSettings(kind=ExecutorKind.LOCAL)})
    async with AsyncExitStack() as stack:
        env = await stack.enter_async_context(open_local_environment(local))
        executor = await stack.enter_async_context(open_ray_executor(cfg.executor))
        yield RayRolloutEnvironment(env, cfg, executor, in_flight=_member_limit(cfg))
