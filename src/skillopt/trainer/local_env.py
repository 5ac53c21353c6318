"""The environment a trainer config asks for, its rollouts run in this process: built
(:func:`build_environment`) or opened with what it holds (:func:`open_local_environment`:
an agent CLI member, your own environment's ``aclose``). :mod:`.build` adds the Ray
executor (:mod:`.remote_env`), which opens one of these on each worker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from skillopt.errors import ConfigError
from skillopt.trainer.config import TrainerConfig
from skillopt.trainer.envs.base import Environment
from skillopt.trainer.envs.qa import QAEnvironment
from skillopt.trainer.envs.registry import BUILTIN, load_factory

if TYPE_CHECKING:
    from skillopt.backends.cli.member import CliBackend

__all__ = ["ENVIRONMENTS", "build_environment", "open_local_environment"]

ENVIRONMENTS = BUILTIN


def build_environment(cfg: TrainerConfig) -> Environment:
    """``qa``, or an environment of your own (an entry point or ``package.module:factory``,
    see :mod:`skillopt.trainer.envs.registry`); ``qa_exec`` needs :func:`open_local_environment`."""
    if cfg.env.name == "qa":
        return QAEnvironment(cfg.env.data_dir, limit=cfg.env.limit, data=cfg.env.data)
    if cfg.env.name == "mcq":
        from skillopt.trainer.envs.mcq import MCQEnvironment

        return MCQEnvironment.from_options(
            cfg.env.data_dir,
            limit=cfg.env.limit,
            options=cfg.env.options,
            default_seed=cfg.train.seed,
            data=cfg.env.data,
        )
    if cfg.env.name == "chat":
        from skillopt.trainer.envs.chat import ChatEnvironment

        return ChatEnvironment(
            cfg.env.data_dir, limit=cfg.env.limit, options=cfg.env.options, data=cfg.env.data
        )
    if cfg.env.name == "exec_check" and not cfg.env.exec_member:
        from skillopt.trainer.envs.exec_check import ExecCheckEnvironment

        return ExecCheckEnvironment(
            cfg.env.data_dir,
            limit=cfg.env.limit,
            options=cfg.env.options,
            keep_workspace=cfg.env.keep_workspace,
            data=cfg.env.data,
        )
    if cfg.env.name in ENVIRONMENTS:
        raise ConfigError(f"{cfg.env.name!r} needs open_environment()", key="env.name")
    env = load_factory(cfg.env.name)(cfg)
    if not isinstance(env, Environment):
        raise ConfigError(
            f"the factory returned {type(env).__name__}, which lacks what an Environment has "
            "(name, items, task_types, rollout)",
            key="env.name",
        )
    return env


@asynccontextmanager
async def open_local_environment(cfg: TrainerConfig) -> AsyncIterator[Environment]:
    """Any environment, its rollouts run here. One that runs an agent CLI is closed (its
    homes removed) on exit, and so is one of your own that has an ``async aclose()``."""
    if cfg.env.name == "exec_check" and cfg.env.exec_member:
        async with _open_exec_check(cfg) as env:
            yield env
        return
    if cfg.env.name != "qa_exec":
        env = build_environment(cfg)
        try:
            yield env
        finally:
            close = getattr(env, "aclose", None)
            if close is not None:
                await close()
        return
    from skillopt.trainer.envs.exec_cli import ExecQAEnvironment

    backend = await _cli_member(cfg)
    qa = QAEnvironment(cfg.env.data_dir, limit=cfg.env.limit, data=cfg.env.data)
    try:
        yield ExecQAEnvironment(qa, backend, keep_workspace=cfg.env.keep_workspace)
    finally:
        await backend.aclose()


async def _cli_member(cfg: TrainerConfig) -> CliBackend:
    """The agent CLI ``env.exec_member`` names in ``backend.pool_config``."""
    from skillopt.backends.cli.member import CliBackend
    from skillopt.backends.factory import build_member
    from skillopt.config import load_pool_config

    if not cfg.env.exec_member or not cfg.backend.pool_config:
        raise ConfigError(
            f"{cfg.env.name} needs env.exec_member, a CLI member of backend.pool_config",
            key="env.exec_member",
        )
    member = load_pool_config(cfg.backend.pool_config).member(cfg.env.exec_member)
    backend = build_member(member)
    if not isinstance(backend, CliBackend):
        await backend.aclose()
        raise ConfigError(f"member {member.name!r} is not an agent CLI", key="env.exec_member")
    return backend


@asynccontextmanager
async def _open_exec_check(cfg: TrainerConfig) -> AsyncIterator[Environment]:
    from skillopt.trainer.envs.exec_check import ExecCheckEnvironment

    backend = await _cli_member(cfg)
    try:
        yield ExecCheckEnvironment(
            cfg.env.data_dir,
            limit=cfg.env.limit,
            options=cfg.env.options,
            backend=backend,
            keep_workspace=cfg.env.keep_workspace,
            data=cfg.env.data,
        )
    finally:
        await backend.aclose()
