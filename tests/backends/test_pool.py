"""BackendPool against real HTTP members on a loopback fake server."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from skillopt.backends.base import Completion, CompletionRequest, Role
from skillopt.backends.cache import ResponseCache
from skillopt.backends.http.member import OpenAIHttpBackend, build_http_member
from skillopt.backends.pool import BackendPool, BreakerPolicy, BreakerState, MemberSpec
from skillopt.backends.retry import RetryPolicy
from skillopt.config import OpenAIChatMember
from skillopt.errors import (
    BackendAuthError,
    BackendRequestError,
    BackendTimeoutError,
    ContentFilterError,
    NoHealthyMemberError,
    RetryableBackendError,
)
from support.fake_model_server import FakeModelServer, Reply

SECRET = "sk-test-0123456789abcdefghijklmnop"
FAST = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.05)


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as srv:
        yield srv


def member(
    server: FakeModelServer,
    name: str,
    *,
    concurrency: int = 4,
    timeout: float = 5.0,
) -> MemberSpec:
    cfg = OpenAIChatMember(
        name=name, base_url=server.url(name), model=f"model-{name}", api_key_env="FAKE_KEY"
    )
    backend: OpenAIHttpBackend = build_http_member(cfg, environ={"FAKE_KEY": SECRET})
    return MemberSpec(backend=backend, max_concurrency=concurrency, timeout=timeout)


def idle(server: FakeModelServer) -> bool:
    return not any(server.in_flight.values())


def req(prompt: str = "hi", **kw: Any) -> CompletionRequest:
    return CompletionRequest(role=Role.TARGET, prompt=prompt, **kw)


async def test_round_robin_is_even_over_three_members(server: FakeModelServer) -> None:
    specs = [member(server, n, concurrency=100) for n in ("a", "b", "c")]
    async with BackendPool({Role.TARGET: specs}, retry=FAST) as pool:
        for i in range(31):
            await pool.complete(req(f"seq {i}", use_cache=False))
        async with anyio.create_task_group() as tg:
            for i in range(60):
                tg.start_soon(pool.complete, req(f"par {i}"))
    counts = [server.total(n) for n in ("a", "b", "c")]
    assert sum(counts) == 91
    assert max(counts) - min(counts) <= 1, counts


async def test_member_concurrency_never_exceeds_its_limit(server: FakeModelServer) -> None:
    server.latency = 0.08
    limits = {"a": 2, "b": 3, "c": 5}
    specs = [member(server, n, concurrency=c) for n, c in limits.items()]
    async with BackendPool({Role.TARGET: specs}, retry=FAST) as pool:
        assert pool.total_concurrency(Role.TARGET) == 10
        async with anyio.create_task_group() as tg:
            for i in range(60):
                tg.start_soon(pool.complete, req(f"p{i}"))
    for name, limit in limits.items():
        assert 0 < server.peak_for(name) <= limit, (name, server.peak_for(name))
    # Capacity is actually used, not just respected.
    assert sum(server.peak_for(n) for n in limits) >= 8


async def test_retry_after_is_honoured(server: FakeModelServer) -> None:
    server.script("a", Reply(status=429, headers={"retry-after-ms": "400"}))
    async with BackendPool({Role.TARGET: [member(server, "a")]}, retry=FAST) as pool:
        result = await pool.complete(req())
    assert result.attempts == 2
    first, second = server.requests_for("a")
    assert second.arrived - first.arrived >= 0.4


async def test_retry_after_seconds_header_and_cap(server: FakeModelServer) -> None:
    server.script("a", Reply(status=503, headers={"retry-after": "600"}))
    policy = RetryPolicy(max_attempts=2, base_delay=0.01, retry_after_cap=0.2)
    async with BackendPool({Role.TARGET: [member(server, "a")]}, retry=policy) as pool:
        with anyio.fail_after(60):  # uncapped, the retry would wait 600 s
            result = await pool.complete(req())
    assert result.attempts == 2
    first, second = server.requests_for("a")
    assert second.arrived - first.arrived >= 0.2


async def test_a_member_told_to_wait_is_avoided_meanwhile(server: FakeModelServer) -> None:
    server.script("a", Reply(status=429, headers={"retry-after-ms": "500"}))
    specs = [member(server, "a"), member(server, "b")]
    firsts: list[Completion] = []
    async with BackendPool({Role.TARGET: specs}, retry=FAST) as pool:

        async def first() -> None:
            firsts.append(await pool.complete(req("first")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            assert await anyio.to_thread.run_sync(
                server.wait_until, lambda s: s.count[("a", "chat")] == 1, 2.0
            )
            others = [await pool.complete(req(f"n{i}")) for i in range(4)]
        later = [await pool.complete(req(f"l{i}")) for i in range(2)]
    assert firsts[0].member == "b" and firsts[0].attempts == 2
    assert {r.member for r in others} == {"b"}
    assert {r.member for r in later} == {"a", "b"}
    assert server.total("a") == 2


async def test_503_fails_over_to_another_member(server: FakeModelServer) -> None:
    server.script("a", Reply(status=503))
    specs = [member(server, "a"), member(server, "b")]
    async with BackendPool({Role.TARGET: specs}, retry=FAST) as pool:
        with capture_logs() as logs:
            result = await pool.complete(req())
        stats = pool.accounting()
    assert result.member == "b" and result.attempts == 2
    assert server.total("a") == 1 and server.total("b") == 1
    warnings = [e for e in logs if e["event"] == "pool.retry"]
    assert len(warnings) == 1 and warnings[0]["member"] == "a" and warnings[0]["status"] == 503
    assert stats["by_member"]["a"]["failures"] == {"server": 1}
    assert stats["by_member"]["a"]["retries"] == 1


@pytest.mark.slow
async def test_breaker_opens_then_half_opens(server: FakeModelServer) -> None:
    server.script("a", *[Reply(status=500)] * 2)
    specs = [member(server, "a"), member(server, "b")]
    # The open window must outlast a few calls even on a busy machine (>= 10x their time).
    breaker = BreakerPolicy(failure_threshold=2, cooldown=1.5)
    async with BackendPool({Role.TARGET: specs}, retry=FAST, breaker=breaker) as pool:
        for i in range(4):
            await pool.complete(req(f"x{i}", use_cache=False))
        assert pool.breaker_state("a") is BreakerState.OPEN
        hits_on_a = server.total("a")
        assert hits_on_a == 2
        for i in range(4):
            result = await pool.complete(req(f"y{i}"))
            assert result.member == "b"
        assert server.total("a") == hits_on_a  # open: no traffic
        await anyio.sleep(1.6)
        assert pool.breaker_state("a") is BreakerState.HALF_OPEN
        # A failing probe re-opens at once (no threshold count in half-open).
        server.script("a", Reply(status=500))
        seen = {(await pool.complete(req(f"z{i}"))).member for i in range(2)}
        assert server.total("a") == hits_on_a + 1 and seen == {"b"}
        assert pool.breaker_state("a") is BreakerState.OPEN
        await anyio.sleep(1.6)
        results = [await pool.complete(req(f"w{i}")) for i in range(2)]
        assert {r.member for r in results} == {"a", "b"}
        assert pool.breaker_state("a") is BreakerState.CLOSED
        assert pool.accounting()["members"]["a"]["times_opened"] == 2


async def test_all_members_open_raises_no_healthy_member(server: FakeModelServer) -> None:
    server.script("a", *[Reply(status=502)] * 3)
    breaker = BreakerPolicy(failure_threshold=1, cooldown=30)
    async with BackendPool(
        {Role.TARGET: [member(server, "a")]}, retry=FAST, breaker=breaker
    ) as pool:
        with pytest.raises(NoHealthyMemberError, match="open circuit"):
            await pool.complete(req())
    assert server.total("a") == 1


async def test_401_fails_fast_with_typed_error(server: FakeModelServer) -> None:
    server.script("a", Reply(status=401))
    async with BackendPool(
        {Role.TARGET: [member(server, "a"), member(server, "b")]}, retry=FAST
    ) as pool:
        with pytest.raises(BackendAuthError) as caught:
            await pool.complete(req())
        stats = pool.accounting()
    assert caught.value.member == "a" and caught.value.status == 401
    assert "member=a" in str(caught.value) and "status=401" in str(caught.value)
    assert SECRET not in str(caught.value) and SECRET not in caught.value.cause
    assert server.total("a") + server.total("b") == 1
    assert stats["total"]["retries"] == 0 and stats["total"]["failures"] == {"auth": 1}


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (Reply(status=400), BackendRequestError),
        (Reply(status=404), BackendRequestError),
        (Reply(status=400, error_code="content_filter"), ContentFilterError),
        (Reply(finish_reason="content_filter"), ContentFilterError),
    ],
)
async def test_fatal_replies_are_not_retried(
    server: FakeModelServer, reply: Reply, error: type[Exception]
) -> None:
    server.script("a", reply)
    async with BackendPool({Role.TARGET: [member(server, "a")]}, retry=FAST) as pool:
        with pytest.raises(error):
            await pool.complete(req())
    assert server.total("a") == 1


@pytest.mark.parametrize(
    "reply",
    [Reply(status=408), Reply(status=409), Reply(drop=True), Reply(malformed=True), Reply(text="")],
)
async def test_transient_replies_are_retried(server: FakeModelServer, reply: Reply) -> None:
    server.script("a", reply)
    async with BackendPool({Role.TARGET: [member(server, "a")]}, retry=FAST) as pool:
        result = await pool.complete(req())
    assert result.attempts == 2 and result.text == "echo: hi"


async def test_hang_times_out_and_fails_over(server: FakeModelServer) -> None:
    server.script("a", Reply(hang=True))
    specs = [member(server, "a", timeout=0.3), member(server, "b", timeout=10)]
    async with BackendPool({Role.TARGET: specs}, retry=FAST) as pool:
        result = await pool.complete(req())
        stats = pool.accounting()
    assert result.member == "b"
    assert stats["by_member"]["a"]["failures"] == {"timeout": 1}
    assert await anyio.to_thread.run_sync(server.wait_until, idle, 30.0)


async def test_request_timeout_overrides_member_timeout(server: FakeModelServer) -> None:
    server.script("a", *[Reply(hang=True)] * 2)
    policy = RetryPolicy(max_attempts=2, base_delay=0.0)
    async with BackendPool({Role.TARGET: [member(server, "a", timeout=60)]}, retry=policy) as pool:
        with anyio.fail_after(30), pytest.raises(BackendTimeoutError):
            await pool.complete(req(timeout=0.2))
    assert server.total("a") == 2


async def test_retries_exhausted_raise_the_last_error(server: FakeModelServer) -> None:
    server.script("a", *[Reply(status=503)] * 4)
    async with BackendPool({Role.TARGET: [member(server, "a")]}, retry=FAST) as pool:
        with pytest.raises(RetryableBackendError) as caught:
            await pool.complete(req())
    assert caught.value.status == 503 and server.total("a") == 4


async def test_cancelling_the_caller_cancels_in_flight_requests(server: FakeModelServer) -> None:
    server.latency = 30.0
    specs = [member(server, "a"), member(server, "b")]
    baseline = set(asyncio.all_tasks())
    async with BackendPool({Role.TARGET: specs}, retry=FAST) as pool:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for i in range(6):
                    tg.start_soon(pool.complete, req(f"c{i}"))
                # Cancel only once all six requests are in flight at the server.
                all_in = await anyio.to_thread.run_sync(
                    server.wait_until, lambda s: sum(s.in_flight.values()) == 6, 30.0
                )
                tg.cancel_scope.cancel()
        assert all_in
        assert pool.accounting()["members"]["a"]["in_flight"] == 0
    done = await anyio.to_thread.run_sync(
        server.wait_until, lambda s: idle(s) and s.disconnects >= 6, 3.0
    )
    assert done, server.stats()
    assert server.total("a") + server.total("b") == 6
    assert set(asyncio.all_tasks()) - baseline == set()


async def test_accounting_matches_reported_usage(server: FakeModelServer) -> None:
    usages = [(13, 5), (20, 8), (7, 2)]
    server.script("a", *[Reply(usage=u) for u in usages], Reply(status=503), Reply(usage=(1, 1)))
    async with BackendPool({Role.TARGET: [member(server, "a")]}, retry=FAST) as pool:
        for i, stage in enumerate(["rollout", "rollout", "judge", "judge"]):
            await pool.complete(req(f"u{i}", stage=stage))
        stats = pool.accounting()
    total = stats["total"]
    assert total["prompt_tokens"] == 13 + 20 + 7 + 1
    assert total["completion_tokens"] == 5 + 8 + 2 + 1
    assert total["tokens_estimated"] is False
    assert total["calls"] == 4 and total["attempts"] == 5 and total["retries"] == 1
    assert stats["by_stage"]["rollout"]["prompt_tokens"] == 33
    assert stats["by_stage"]["judge"]["failures"] == {"server": 1}
    assert stats["by_role"]["target"]["calls"] == 4
    assert total["latency_p50"] is not None and total["latency_max"] >= total["latency_p95"]


async def test_missing_usage_is_estimated_and_marked(server: FakeModelServer) -> None:
    server.script("a", Reply(usage=None, text="a reply of some length"))
    async with BackendPool({Role.TARGET: [member(server, "a")]}) as pool:
        result = await pool.complete(req("a prompt that is long enough"))
        stats = pool.accounting()
    assert result.usage.estimated and result.usage.completion_tokens > 0
    assert stats["total"]["tokens_estimated"] is True


async def test_cache_hits_misses_and_bypass(server: FakeModelServer) -> None:
    server.script("a", Reply(status=503), Reply(text=""), Reply(text="first"))
    cache = ResponseCache()
    async with BackendPool({Role.TARGET: [member(server, "a")]}, retry=FAST, cache=cache) as pool:
        one = await pool.complete(req("same"))
        two = await pool.complete(req("same"))
        fresh = await pool.complete(req("same", use_cache=False))
        other_sample = await pool.complete(req("same", sample_id=1))
        stats = pool.accounting()
    assert one.text == "first" and one.attempts == 3 and not one.cached
    assert two.cached and two.text == "first" and two.attempts == 0
    assert fresh.text == "echo: same" and not fresh.cached
    assert not other_sample.cached
    assert server.total("a") == 5
    assert stats["total"]["cache_hits"] == 1 and stats["cache"]["entries"] == 2


async def test_roles_are_separate_and_members_may_be_shared(server: FakeModelServer) -> None:
    shared = member(server, "s", concurrency=2)
    opt = member(server, "o", concurrency=3)
    async with BackendPool({Role.TARGET: [shared], Role.OPTIMIZER: [shared, opt]}) as pool:
        assert pool.total_concurrency(Role.TARGET) == 2
        assert pool.total_concurrency(Role.OPTIMIZER) == 5
        server.latency = 0.03
        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(pool.complete, req(f"t{i}"))
                tg.start_soon(pool.complete, CompletionRequest(role=Role.OPTIMIZER, prompt=f"o{i}"))
        stats = pool.accounting()
    assert server.peak_for("s") <= 2 and server.peak_for("o") <= 3
    assert stats["by_role"]["target"]["calls"] == 20
    assert stats["by_role"]["optimizer"]["calls"] == 20
    assert server.total("o") > 0


async def test_unknown_role_raises(server: FakeModelServer) -> None:
    async with BackendPool({Role.TARGET: [member(server, "a")]}) as pool:
        with pytest.raises(NoHealthyMemberError):
            await pool.complete(CompletionRequest(role=Role.OPTIMIZER, prompt="x"))


@pytest.mark.slow
async def test_many_waiters_complete_with_jittered_latency(server: FakeModelServer) -> None:
    rng = random.Random(7)
    server.rule = lambda _r: Reply(latency=rng.uniform(0.0, 0.01))
    specs = [member(server, n, concurrency=3) for n in ("a", "b")]
    async with BackendPool({Role.TARGET: specs}) as pool:
        results: list[str] = []

        async def one(i: int) -> None:
            results.append((await pool.complete(req(f"m{i}"))).text)

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for i in range(300):
                    tg.start_soon(one, i)
    assert len(results) == 300
    assert server.peak_for("a") <= 3 and server.peak_for("b") <= 3
