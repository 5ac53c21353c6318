"""Backends for trainer tests: real Backend implementations driven by a reply function."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from skillopt.backends.base import Backend, Completion, CompletionRequest, Role, Usage
from skillopt.backends.pool import BackendPool, MemberSpec
from skillopt.errors import BackendRequestError
from skillopt.trainer.demo import DemoWorld, infer_stage
from skillopt.trainer.envs.qa import QAEnvironment
from skillopt.types import Split
from support.fake_model_server import Request


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


def demo_reply_fn(env: QAEnvironment, *, broken_first_analyst: bool = False) -> Any:
    """The demo world model answering over HTTP (the fake model server's ``reply_fn``);
    ``broken_first_analyst`` makes the first analyst reply unusable, forcing a retry."""
    world = DemoWorld()
    items = {
        QAEnvironment.user_prompt(item): dict(item.data)
        for split in Split
        for item in env.items(split)
    }
    state = {"broken": broken_first_analyst}

    def reply(request: Request) -> str:
        messages = request.body.get("messages", [])
        system = "".join(
            str(m["content"]) for m in messages if m["role"] in ("system", "developer")
        )
        user = request.user_text
        if state["broken"] and infer_stage(user) == "analyst" and len(messages) == 1:
            state["broken"] = False
            return "I think the skill should mention numbers."  # not JSON: forces the retry
        return world.chat_reply(system=system, user=user, items=items)

    return reply
