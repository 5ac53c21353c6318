"""A real :class:`BackendPool` with one OpenAI-compatible member on the fake model server."""

from __future__ import annotations

from skillopt.backends.pool import BackendPool
from skillopt.config import OpenAIChatMember, PoolConfig, RetryConfig
from support.fake_model_server import FakeModelServer


def one_member_pool(server: FakeModelServer, *, name: str = "opt") -> BackendPool:
    """Member ``name`` serves both roles; no retries, so every call is counted once."""
    cfg = PoolConfig(
        members=[OpenAIChatMember(name=name, base_url=server.url(name), model="m", timeout=5)],
        roles={"target": [name], "optimizer": [name]},
        retry=RetryConfig(max_attempts=1, base_delay=0, max_delay=0),
    )
    return BackendPool.from_config(cfg)
