"""Build one pool member from its config, dispatching on ``kind``.

HTTP kinds are built here (``http/member.py``); ``mock``, ``handoff`` and the CLI kinds live in
modules of their own, imported only when such a member is configured.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from skillopt.backends.base import Backend
from skillopt.config import CLI_KINDS, HTTP_KINDS, MemberConfig
from skillopt.errors import ConfigError

if TYPE_CHECKING:
    import httpx2

__all__ = ["build_member", "needs_http_client"]


def needs_http_client(cfg: MemberConfig) -> bool:
    """True for members that talk HTTP through the shared client."""
    return cfg.kind in HTTP_KINDS


def _builder(module: str, function: str, kind: str) -> Any:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise ConfigError(f"member kind {kind!r} is not available", key="kind") from exc
    try:
        return getattr(mod, function)
    except AttributeError as exc:
        raise ConfigError(f"member kind {kind!r} is not available", key="kind") from exc


def build_member(cfg: MemberConfig, *, http_client: httpx2.AsyncClient | None = None) -> Backend:
    """A ready :class:`Backend` for ``cfg``. Missing env vars or modules raise ConfigError."""
    if cfg.kind in HTTP_KINDS:
        from skillopt.backends.http.member import build_http_member

        return build_http_member(cfg, http_client=http_client)  # type: ignore[arg-type]
    if cfg.kind == "mock":
        build = _builder("skillopt.backends.mock", "build_mock_member", cfg.kind)
    elif cfg.kind == "handoff":
        build = _builder("skillopt.backends.handoff", "build_handoff_member", cfg.kind)
    elif cfg.kind in CLI_KINDS:
        build = _builder("skillopt.backends.cli.member", "build_cli_member", cfg.kind)
    else:  # pragma: no cover - the config union admits no other kind
        raise ConfigError(f"unknown member kind {cfg.kind!r}", key="kind")
    backend: Backend = build(cfg)
    return backend
