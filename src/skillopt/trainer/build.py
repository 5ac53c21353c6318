"""Build the environment and the backend pool a trainer config asks for."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from skillopt.backends.base import Role
from skillopt.backends.pool import BackendPool, MemberSpec
from skillopt.errors import ConfigError
from skillopt.trainer.config import BackendKind, TrainerConfig
from skillopt.trainer.demo import DemoWorld
from skillopt.trainer.envs.base import Environment
from skillopt.trainer.envs.qa import QAEnvironment

__all__ = ["build_environment", "open_pool"]


def build_environment(cfg: TrainerConfig) -> Environment:
    if cfg.env.name == "qa":
        return QAEnvironment(cfg.env.data_dir, limit=cfg.env.limit)
    raise ConfigError(f"unknown environment {cfg.env.name!r} (known: qa)", key="env.name")


@asynccontextmanager
async def open_pool(cfg: TrainerConfig) -> AsyncIterator[BackendPool]:
    """The pool for both roles: the demo world model, or members from a pool config file."""
    if cfg.backend.kind is BackendKind.DEMO:
        spec = MemberSpec(
            backend=DemoWorld(latency_s=cfg.backend.demo_latency_s),
            max_concurrency=cfg.backend.max_concurrency,
            timeout=cfg.backend.optimizer_timeout_s,
        )
        pool = BackendPool({Role.TARGET: [spec], Role.OPTIMIZER: [spec]})
    else:
        if not cfg.backend.pool_config:
            raise ConfigError("required when backend.kind = 'pool'", key="backend.pool_config")
        from skillopt.config import load_pool_config

        pool = BackendPool.from_config(load_pool_config(cfg.backend.pool_config))
    async with pool:
        yield pool
