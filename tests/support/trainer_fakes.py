"""Backends for trainer tests: real Backend implementations driven by a reply function."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from skillopt.backends.base import Backend, Completion, CompletionRequest, Role, Usage
from skillopt.backends.pool import BackendPool, MemberSpec
from skillopt.errors import BackendRequestError


@dataclass
class ScriptedBackend:
    """Answers with ``reply(request)``; optional per-call delay from ``delay(request)``."""

    reply: Callable[[CompletionRequest], str]
    delay: Callable[[CompletionRequest], float] = lambda _r: 0.0
    requests: list[CompletionRequest] = field(default_factory=list)
    name: str = "scripted"
    model: str = "scripted-model"

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        wait = self.delay(request)
        if wait:
            await anyio.sleep(wait)
        text = self.reply(request)
        return Completion(
            text=text,
            usage=Usage.estimate(request.text_for_key(), text),
            member=self.name,
            latency=wait,
        )

    async def aclose(self) -> None:
        return None


@dataclass
class FailingWrapper:
    """Delegates to ``inner`` but raises a fatal error on the calls ``fail(request)`` picks."""

    inner: Backend
    fail: Callable[[CompletionRequest], bool]
    name: str = "failing"
    model: str = "failing-model"
    calls: list[CompletionRequest] = field(default_factory=list)

    async def complete(self, request: CompletionRequest) -> Completion:
        self.calls.append(request)
        if self.fail(request):
            raise BackendRequestError("injected failure", member=self.name, status=400)
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        return None


def pool_of(backend: Backend, *, concurrency: int = 16) -> BackendPool:
    """A real pool serving both roles from one member."""
    spec = MemberSpec(backend=backend, max_concurrency=concurrency, timeout=30.0)
    return BackendPool({Role.TARGET: [spec], Role.OPTIMIZER: [spec]})


@dataclass
class Jitter:
    """Delegates to ``inner`` after a pause drawn from a seeded RNG, so completion order
    differs from call order (and from a plain run) yet is the same every run."""

    inner: Backend
    max_delay: float = 0.003
    name: str = "jitter"
    model: str = "jitter-model"
    pauses: random.Random = field(default_factory=lambda: random.Random(5))

    async def complete(self, request: CompletionRequest) -> Completion:
        await anyio.sleep(self.pauses.random() * self.max_delay)
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        return None
