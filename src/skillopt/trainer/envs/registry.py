"""Finding the environment ``env.name`` names, so a package of your own needs no edit of ours.

A name is one of:

- a built-in (:data:`BUILTIN`: ``qa``, ``qa_exec``, ``mcq``, ``exec_check``,
  ``chat``), built by
  :mod:`skillopt.trainer.build`;
- an installed entry point of the ``skillopt.environments`` group, declared by the package
  that provides it (``[project.entry-points."skillopt.environments"]
  arith = "my_envs.arith:make_env"``);
- a dotted path ``package.module:factory`` to a factory importable from ``sys.path``.

A factory is called with the validated :class:`~skillopt.trainer.config.TrainerConfig`
(its own settings live in ``env.options``) and returns an
:class:`~skillopt.trainer.envs.base.Environment`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from skillopt.errors import ConfigError

if TYPE_CHECKING:
    from skillopt.trainer.config import TrainerConfig
    from skillopt.trainer.envs.base import Environment

__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "EnvironmentFactory", "installed", "load_factory"]

BUILTIN = ("qa", "qa_exec", "mcq", "exec_check", "chat")
ENTRY_POINT_GROUP = "skillopt.environments"

EnvironmentFactory = Callable[["TrainerConfig"], "Environment"]

_KEY = "env.name"


def installed() -> list[str]:
    """Names of the environments installed packages declare as entry points."""
    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def _entry_point(name: str) -> EntryPoint:
    found = list(entry_points(group=ENTRY_POINT_GROUP, name=name))
    if not found:
        known = ", ".join([*BUILTIN, *installed()])
        raise ConfigError(
            f"unknown environment {name!r} (known: {known}); a package of your own can "
            f"declare one as an entry point in the {ENTRY_POINT_GROUP!r} group, or write "
            '"package.module:factory"',
            key=_KEY,
        )
    return found[0]


def _import(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ConfigError(f'{target!r} is not "package.module:factory"', key=_KEY)
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r}: {exc}", key=_KEY) from exc
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise ConfigError(f"{module_name!r} has no {attr!r}", key=_KEY) from None
    return found


def load_factory(name: str) -> EnvironmentFactory:
    """The factory ``name`` refers to (not a built-in); a ConfigError says why not."""
    target = name if ":" in name else _entry_point(name).value
    factory = _import(target)
    if not callable(factory):
        raise ConfigError(f"{target!r} is not callable (expected a factory)", key=_KEY)
    result: EnvironmentFactory = factory
    return result
