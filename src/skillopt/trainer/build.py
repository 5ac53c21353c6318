"""Build the environment and the backend pool a trainer config asks for."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from skillopt.backends.base import Role
from skillopt.backends.open import CompleterStack, open_completer
from skillopt.backends.pool import BackendPool, MemberSpec
from skillopt.errors import ConfigError
from skillopt.executor.settings import ExecutorKind
from skillopt.trainer.config import BackendKind, TrainerConfig
from skillopt.trainer.demo import DemoWorld
from skillopt.trainer.envs.base import Environment
from skillopt.trainer.local_env import ENVIRONMENTS, build_environment, open_local_environment

if TYPE_CHECKING:
    from skillopt.config import PoolConfig

__all__ = ["ENVIRONMENTS", "build_environment", "open_environment", "open_pool"]


@asynccontextmanager
async def open_environment(cfg: TrainerConfig) -> AsyncIterator[Environment]:
    """Any environment (:func:`.local_env.open_local_environment`). With ``[executor] kind =
    "ray"`` its rollouts run as Ray tasks (:mod:`skillopt.trainer.remote_env`)."""
    if cfg.executor.kind is ExecutorKind.RAY:
        from skillopt.trainer.remote_env import open_ray_environment

        async with open_ray_environment(cfg) as remote:
            yield remote
        return
    async with open_local_environment(cfg) as env:
        yield env


@asynccontextmanager
async def open_pool(cfg: TrainerConfig) -> AsyncIterator[CompleterStack]:
    """The stack for both roles: the demo world model, or members from a pool config file."""
    source: BackendPool | PoolConfig
    if cfg.backend.kind is BackendKind.DEMO:
        spec = MemberSpec(
            backend=DemoWorld(latency_s=cfg.backend.demo_latency_s),
            max_concurrency=cfg.backend.max_concurrency,
            timeout=cfg.backend.optimizer_timeout_s,
        )
        source = BackendPool({Role.TARGET: [spec], Role.OPTIMIZER: [spec]})
    else:
        if not cfg.backend.pool_config:
            raise ConfigError("required when backend.kind = 'pool'", key="backend.pool_config")
        from skillopt.config import load_pool_config

        source = load_pool_config(cfg.backend.pool_config)
    async with open_completer(source) as stack:
        yield stack
