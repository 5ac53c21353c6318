"""A real :class:`BackendPool` with one OpenAI-compatible member on the fake model server."""

from __future__ import annotations

from skillopt.backends.base import Backend, Role
from skillopt.backends.breaker import BreakerPolicy
from skillopt.backends.cache import ResponseCache
from skillopt.backends.pool import BackendPool, MemberSpec
from skillopt.backends.retry import RetryPolicy
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


def scripted_pool(member: Backend, *, cache: bool = False, concurrency: int = 2) -> BackendPool:
    """A real pool over one scripted in-process member serving both roles: one attempt per
    call (every scripted failure is a lost call), a breaker that never opens, and the
    response cache a night has when ``cache``."""
    spec = MemberSpec(backend=member, max_concurrency=concurrency, timeout=30.0)
    return BackendPool(
        {Role.TARGET: [spec], Role.OPTIMIZER: [spec]},
        retry=RetryPolicy(max_attempts=1),
        breaker=BreakerPolicy(failure_threshold=1_000_000),
        cache=ResponseCache() if cache else None,
    )
