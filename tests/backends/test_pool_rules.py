"""Pool rules the other pool tests do not pin: one half-open probe, full members skipped,
rate limits never open a circuit, an exhausted quota fails fast."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from skillopt.backends.base import Completion, CompletionRequest, Role, Usage
from skillopt.backends.http.member import build_http_member
from skillopt.backends.pool import BackendPool, BreakerPolicy, BreakerState, MemberSpec
from skillopt.backends.retry import RetryPolicy
from skillopt.config import OpenAIChatMember
from skillopt.errors import QuotaExhaustedError, RetryableBackendError
from support.fake_model_server import FakeModelServer, Reply


class GatedMember:
    """A Backend whose calls fail while ``failing`` and otherwise wait for ``release``."""

    def __init__(self, name: str) -> None:
        self._name = name
        self.failing = False
        self.release = anyio.Event()
        self.started = 0
        self.in_flight = 0
        self.peak = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return "gated"

    async def complete(self, request: CompletionRequest) -> Completion:
        self.started += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await anyio.lowlevel.checkpoint()
            if self.failing:
                raise RetryableBackendError("down", kind="server", status=503)
            await self.release.wait()
            return Completion(
                text=f"{self._name}:{request.prompt}",
                usage=Usage(prompt_tokens=1, completion_tokens=1),
                member=self._name,
                latency=0.0,
            )
        finally:
            self.in_flight -= 1

    async def aclose(self) -> None:
        return None


def req(prompt: str) -> CompletionRequest:
    return CompletionRequest(role=Role.TARGET, prompt=prompt, use_cache=False)


async def test_a_half_open_member_gets_exactly_one_probe() -> None:
    flaky, steady = GatedMember("flaky"), GatedMember("steady")
    steady.release.set()
    flaky.failing = True
    async with BackendPool(
        {
            Role.TARGET: [
                MemberSpec(backend=flaky, max_concurrency=8),
                MemberSpec(backend=steady, max_concurrency=8),
            ]
        },
        retry=RetryPolicy(max_attempts=2, base_delay=0.0),
        # open long enough to be seen open on a busy machine (>= 10x the call's time)
        breaker=BreakerPolicy(failure_threshold=1, cooldown=1.0),
    ) as pool:
        with anyio.fail_after(60):
            await pool.complete(req("open it"))  # flaky fails once (opens), steady answers
            assert pool.breaker_state("flaky") is BreakerState.OPEN
            await anyio.sleep(1.1)
            assert pool.breaker_state("flaky") is BreakerState.HALF_OPEN
            flaky.failing, before = False, flaky.started
            served: list[str] = []

            async def one(i: int) -> None:
                served.append((await pool.complete(req(f"q{i}"))).member)

            async with anyio.create_task_group() as tg:
                for i in range(6):
                    tg.start_soon(one, i)
                await anyio.wait_all_tasks_blocked()
                probes = flaky.started - before  # the probe is still in flight here
                flaky.release.set()
    assert probes == 1
    assert sorted(served) == ["flaky"] + ["steady"] * 5


async def test_a_full_member_is_skipped_while_another_has_room() -> None:
    busy, free = GatedMember("busy"), GatedMember("free")
    free.release.set()
    async with BackendPool(
        {
            Role.TARGET: [
                MemberSpec(backend=busy, max_concurrency=1),
                MemberSpec(backend=free, max_concurrency=4),
            ]
        },
    ) as pool:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(pool.complete, req("long"))  # round-robin starts at "busy"
                await anyio.wait_all_tasks_blocked()
                assert busy.in_flight == 1
                # Round-robin would hand every other call to "busy", which is full.
                for i in range(6):
                    done = await pool.complete(req(f"q{i}"))
                    assert done.member == "free"
                busy.release.set()
    assert busy.peak == 1 and busy.started == 1


class Limited:
    """A Backend that answers 429 (with a short Retry-After) ``n`` times, then succeeds."""

    def __init__(self, name: str, n: int) -> None:
        self._name, self.left, self.calls = name, n, 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return "limited"

    async def complete(self, request: CompletionRequest) -> Completion:
        self.calls += 1
        await anyio.lowlevel.checkpoint()
        if self.left > 0:
            self.left -= 1
            raise RetryableBackendError(
                "rate limited", kind="rate_limit", status=429, retry_after=0.01
            )
        return Completion(text="ok", usage=Usage(), member=self._name, latency=0.0)

    async def aclose(self) -> None:
        return None


async def test_rate_limits_do_not_open_the_circuit() -> None:
    """A member that says "retry in 10 ms" is busy, not broken: never fail calls fast."""
    only = Limited("only", n=6)
    async with BackendPool(
        {Role.TARGET: [MemberSpec(backend=only, max_concurrency=4)]},
        retry=RetryPolicy(max_attempts=8, base_delay=0.0),
        breaker=BreakerPolicy(failure_threshold=3, cooldown=30.0),
    ) as pool:
        with anyio.fail_after(60):
            done = await pool.complete(req("q"))
        assert done.text == "ok" and done.attempts == 7
        assert pool.breaker_state("only") is BreakerState.CLOSED
        assert pool.accounting()["by_member"]["only"]["failures"] == {"rate_limit": 6}


async def test_exhausted_quota_fails_fast_and_counts_against_the_member() -> None:
    with FakeModelServer() as server:
        server.script("a", *[Reply(status=429, error_code="insufficient_quota")] * 2)
        cfg = OpenAIChatMember(name="a", base_url=server.url("a"), model="m")
        async with BackendPool(
            {Role.TARGET: [MemberSpec(backend=build_http_member(cfg), timeout=5.0)]},
            retry=RetryPolicy(max_attempts=4, base_delay=0.0),
            breaker=BreakerPolicy(failure_threshold=2, cooldown=30.0),
        ) as pool:
            for _ in range(2):
                with pytest.raises(QuotaExhaustedError, match="quota exhausted"):
                    await pool.complete(req("q"))
            assert server.total("a") == 2  # no retries
            assert pool.breaker_state("a") is BreakerState.OPEN


async def test_one_probe_even_when_the_member_is_rate_spaced() -> None:
    """Callers that pick a half-open member while its probe waits for its rpm turn go
    elsewhere: the probe is claimed at pick time, not when the request starts."""
    flaky, steady = GatedMember("flaky"), GatedMember("steady")
    steady.release.set()
    flaky.failing = True
    async with BackendPool(
        {
            Role.TARGET: [
                MemberSpec(backend=flaky, max_concurrency=8, requests_per_minute=300),
                MemberSpec(backend=steady, max_concurrency=8),
            ]
        },
        retry=RetryPolicy(max_attempts=2, base_delay=0.0),
        breaker=BreakerPolicy(failure_threshold=1, cooldown=0.02),
    ) as pool:
        with anyio.fail_after(60):
            await pool.complete(req("open it"))  # flaky fails (next rpm turn in 0.2 s)
            await anyio.sleep(0.05)
            assert pool.breaker_state("flaky") is BreakerState.HALF_OPEN
            flaky.failing, before = False, flaky.started
            flaky.release.set()
            served: list[str] = []

            async def one(i: int) -> None:
                served.append((await pool.complete(req(f"q{i}"))).member)

            async with anyio.create_task_group() as tg:
                for i in range(6):
                    tg.start_soon(one, i)
    assert flaky.started - before == 1
    assert sorted(served) == ["flaky"] + ["steady"] * 5
