"""The completer wrappers over a real pool: redaction, drain, and what they pass through."""

from __future__ import annotations

import anyio
import pytest

from skillopt.backends.base import Completion, CompletionRequest, Message, Role, Usage
from skillopt.backends.cache import ResponseCache
from skillopt.backends.pool import BackendPool, MemberSpec
from skillopt.backends.wrappers import DrainingCompleter, RedactingCompleter, StageCounter
from skillopt.config import OpenAIChatMember, PoolConfig, RetryConfig
from skillopt.errors import BackendRequestError, ReplyFormatError, RetryableBackendError
from support.fake_model_server import FakeModelServer, Reply
from support.trainer_fakes import FailingWrapper, ScriptedBackend, pool_of

GITHUB = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123"
OPENAI = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2"


async def test_every_text_of_a_request_is_redacted_before_the_pool() -> None:
    member = ScriptedBackend(reply=lambda _r: "ok")
    async with pool_of(member) as pool:
        stack = RedactingCompleter(pool)
        await stack.complete(
            CompletionRequest(
                role=Role.TARGET,
                system=f"key {OPENAI}",
                messages=(
                    Message(role="user", content=f"token {GITHUB}"),
                    Message(role="assistant", content=f"I saw {OPENAI}"),
                ),
                metadata={"tool_outputs": {"search": f"found {GITHUB}"}, "n": 3},
            )
        )
        await stack.complete(CompletionRequest(role=Role.OPTIMIZER, prompt=f"use {GITHUB}"))
        assert stack.total_concurrency(Role.TARGET) == pool.total_concurrency(Role.TARGET)
        assert stack.accounting()["total"]["calls"] == 2
    first, second = member.requests
    sent = [first.system, *(m.content for m in first.messages), second.prompt]
    sent.append(first.metadata["tool_outputs"]["search"])
    assert all("[REDACTED:" in text for text in sent), sent
    assert not any(GITHUB in text or OPENAI in text for text in sent)
    assert first.metadata["n"] == 3 and [m.role for m in first.messages] == ["user", "assistant"]


class GatedMember(ScriptedBackend):
    """Answers once ``release`` is set; ``started`` is set by the first call."""

    def __init__(self) -> None:
        super().__init__(reply=lambda _r: "done")
        self.started = anyio.Event()
        self.release = anyio.Event()

    async def complete(self, request: CompletionRequest) -> Completion:
        self.started.set()
        await self.release.wait()
        return await super().complete(request)


async def test_a_drained_stack_lets_calls_in_flight_finish_and_starts_no_new_one() -> None:
    member = GatedMember()
    results: list[str] = []
    drained = anyio.Event()
    async with pool_of(member) as pool, anyio.create_task_group() as tg:
        stack = DrainingCompleter(pool)
        request = CompletionRequest(role=Role.TARGET, prompt="p")

        async def call() -> None:
            results.append((await stack.complete(request)).text)

        async def drain() -> None:
            await stack.drain()
            drained.set()

        tg.start_soon(call)
        await member.started.wait()
        tg.start_soon(drain)
        tg.start_soon(call)  # after the stop: waits until cancelled
        await anyio.wait_all_tasks_blocked()
        assert not drained.is_set()
        member.release.set()
        await drained.wait()
        tg.cancel_scope.cancel()
    assert results == ["done"] and len(member.requests) == 1


async def test_stage_counter_tallies_calls_and_tokens_per_stage() -> None:
    seen: list[str] = []
    counter = StageCounter(ScriptedBackend(reply=lambda _r: "abcdefgh"), on_call=seen.append)
    for stage in ("rollout", "rollout", "analyst"):
        await counter.complete(CompletionRequest(role=Role.TARGET, prompt="x" * 40, stage=stage))
    snap = counter.snapshot()
    assert snap["rollout"] == {
        "calls": 2,
        "cache_hits": 0,
        "prompt_tokens": 22,
        "completion_tokens": 4,
        "cached_tokens": 0,
    }
    assert StageCounter.delta({"rollout": snap["rollout"]}, snap) == {"analyst": snap["analyst"]}
    assert seen == ["rollout", "rollout", "analyst"]


async def test_stage_counter_counts_cache_hits_apart_from_answered_calls() -> None:
    backend = ScriptedBackend(reply=lambda _r: "abcdefgh")
    spec = MemberSpec(backend=backend, max_concurrency=2, timeout=5.0)
    pool = BackendPool({Role.TARGET: [spec], Role.OPTIMIZER: [spec]}, cache=ResponseCache())
    counter = StageCounter(pool)
    request = CompletionRequest(role=Role.TARGET, prompt="x" * 40, stage="rollout")
    for _ in range(3):
        await counter.complete(request)
    row = counter.snapshot()["rollout"]
    assert (row["calls"], row["cache_hits"]) == (1, 2) and len(backend.requests) == 1
    assert row["prompt_tokens"] == 11  # tokens of the one answered call only


async def test_stage_counter_counts_every_request_an_unusable_reply_was_asked_again() -> None:
    """The pool asks again when a reply is unusable (``check_reply``): the trainer's
    accounting counts both requests and both replies' tokens, as the server saw them."""
    replies = iter(["not a verdict", '{"score": 1.0}'])
    backend = ScriptedBackend(reply=lambda _r: next(replies))

    def usable(text: str) -> None:
        if not text.startswith("{"):
            raise ReplyFormatError("no JSON object", raw=text)

    async with pool_of(backend) as pool:
        counter = StageCounter(pool)
        await counter.complete(
            CompletionRequest(role=Role.OPTIMIZER, prompt="x" * 40, stage="judge",
                              check_reply=usable)
        )  # fmt: skip
    row = counter.snapshot()["judge"]
    assert row["calls"] == len(backend.requests) == 2
    assert row["completion_tokens"] == sum(
        Usage.estimate(r.text_for_key(), t).completion_tokens
        for r, t in zip(backend.requests, ["not a verdict", '{"score": 1.0}'], strict=True)
    )


async def test_stage_counter_counts_the_requests_of_a_call_that_failed_outright() -> None:
    """Issue 31: a call whose every attempt failed (three 5xx, retried by the pool) still
    sent three requests: the trainer's accounting counts each, as the server saw them."""
    replies = iter([Reply(status=500), Reply(status=502), Reply(status=503)])
    with FakeModelServer(rule=lambda _r: next(replies)) as server:
        cfg = PoolConfig(
            members=[OpenAIChatMember(name="m", base_url=server.url("m"), model="m", timeout=5)],
            roles={"target": ["m"], "optimizer": ["m"]},
            retry=RetryConfig(max_attempts=3, base_delay=0, max_delay=0),
        )
        async with BackendPool.from_config(cfg) as pool:
            counter = StageCounter(pool)
            with pytest.raises(RetryableBackendError):
                await counter.complete(
                    CompletionRequest(role=Role.OPTIMIZER, prompt="judge this", stage="judge")
                )
        sent = server.total("m")
    row = counter.snapshot()["judge"]
    assert row["calls"] == sent == 3


async def test_stage_counter_over_a_bare_completer_counts_a_failed_call_once() -> None:
    backend = FailingWrapper(ScriptedBackend(reply=lambda _r: "ok"), fail=lambda _r: True)
    counter = StageCounter(backend)
    with pytest.raises(BackendRequestError):
        await counter.complete(CompletionRequest(role=Role.TARGET, prompt="x", stage="rollout"))
    assert counter.snapshot()["rollout"]["calls"] == 1 == len(backend.calls)
