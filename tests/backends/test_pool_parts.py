"""Pool parts without HTTP: the cache file, accounting maths, contract-breaking members."""

from __future__ import annotations

import math
import random
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from structlog.testing import capture_logs

from skillopt.backends.accounting import Accounting, _percentile
from skillopt.backends.base import Completion, CompletionRequest, Message, Role, Usage
from skillopt.backends.cache import CachedReply, ResponseCache, cache_key
from skillopt.backends.pool import BackendPool, BreakerPolicy, MemberSpec
from skillopt.backends.retry import RetryPolicy
from skillopt.config import PoolConfig
from skillopt.errors import CorruptStateError, NoHealthyMemberError, RetryableBackendError

FAST = RetryPolicy(max_attempts=3, base_delay=0.0)


class ScriptedMember:
    """A member (a Backend implementation, not a stand-in for pool code) replaying outcomes."""

    def __init__(self, name: str, outcomes: list[str | BaseException]) -> None:
        self._name = name
        self._outcomes = outcomes
        self.calls = 0
        self.closed = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return "scripted"

    async def complete(self, request: CompletionRequest) -> Completion:
        self.calls += 1
        outcome = self._outcomes.pop(0) if self._outcomes else "default"
        await anyio.lowlevel.checkpoint()
        if isinstance(outcome, BaseException):
            raise outcome
        return Completion(
            text=outcome, usage=Usage(prompt_tokens=2, completion_tokens=3), member="", latency=0
        )

    async def aclose(self) -> None:
        self.closed = True


def req(prompt: str = "p", **kw: object) -> CompletionRequest:
    return CompletionRequest(role=Role.TARGET, prompt=prompt, **kw)  # type: ignore[arg-type]


def test_cache_key_separates_every_field() -> None:
    base = cache_key(role="target", model="m", request=req("ab"))
    assert base == cache_key(role="target", model="m", request=req("ab"))
    variants = {
        cache_key(role="optimizer", model="m", request=req("ab")),
        cache_key(role="target", model="m2", request=req("ab")),
        cache_key(role="target", model="m", request=req("ab", sample_id=1)),
        cache_key(role="target", model="m", request=req("ab", system="s")),
        cache_key(role="target", model="m", request=req("ab", max_output_tokens=7)),
        cache_key(role="target", model="m", request=req("ab", json_mode=True)),
    }
    assert base not in variants and len(variants) == 6
    # A prompt is the same conversation as one user message, so the same key.
    as_messages = req(messages=(Message(role="user", content="ab"),))
    assert cache_key(role="target", model="m", request=as_messages) == base


def test_disk_cache_survives_restart_and_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "responses.jsonl"
    cache = ResponseCache(path)
    usage = Usage(prompt_tokens=3, completion_tokens=4)
    assert cache.put(
        "k1", CachedReply(text="hello sk-abcdefghijklmnopqrstu1234", usage=usage, member="a")
    )
    assert not cache.put("k2", CachedReply(text="   ", usage=usage, member="a"))
    assert not cache.put("k1", CachedReply(text="other", usage=usage, member="a"))
    assert not path.exists()  # buffered until a batch is full or flush()
    cache.flush()
    with path.open("a") as handle:
        handle.write('{"key": "torn", "te')
    reloaded = ResponseCache(path)
    hit = reloaded.get("k1")
    assert hit is not None and hit.usage == usage and hit.member == "a"
    assert "sk-abcdefghijklmnopqrstu1234" not in hit.text and "REDACTED" in hit.text
    assert reloaded.get("k2") is None and reloaded.get("torn") is None
    assert (reloaded.hits, reloaded.misses) == (1, 2)


def test_disk_cache_writes_in_batches_and_compacts(tmp_path: Path) -> None:
    path = tmp_path / "responses.jsonl"
    cache = ResponseCache(path, max_entries=3, flush_every=2)

    def lines() -> int:
        return len(path.read_text().splitlines()) if path.exists() else 0

    for i in range(7):
        cache.put(f"k{i}", CachedReply(text=f"t{i}", usage=Usage(), member="m"))
        assert lines() == (i + 1) // 2 * 2
    cache.flush()
    assert lines() == 7
    reloaded = ResponseCache(path, max_entries=3)
    assert len(reloaded) == 3 and reloaded.get("k6") is not None and reloaded.get("k0") is None
    assert lines() == 3  # 7 > 2 * 3 lines: compacted on load


def test_corrupt_cache_file_is_an_error_not_a_silent_reset(tmp_path: Path) -> None:
    path = tmp_path / "responses.jsonl"
    path.write_text('{"key": "k", "text": "t"}\n')
    with pytest.raises(CorruptStateError):
        ResponseCache(path)


def test_cache_is_bounded() -> None:
    cache = ResponseCache(max_entries=2)
    for key in ("a", "b", "c"):
        cache.put(key, CachedReply(text=key, usage=Usage(), member="m"))
    assert len(cache) == 2 and cache.get("a") is None and cache.get("c") is not None


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 0.5, None),
        ([1.0], 0.95, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 0.5, 2.0),
        ([float(i) for i in range(1, 101)], 0.95, 95.0),
        ([float(i) for i in range(1, 101)], 0.5, 50.0),
    ],
)
def test_percentile_nearest_rank(values: list[float], q: float, expected: float | None) -> None:
    assert _percentile(values, q) == expected


def test_accounting_reservoir_stays_bounded() -> None:
    acct = Accounting(seed=1)
    for i in range(30_000):
        acct.success(
            member="m", role="target", stage="s", usage=Usage(prompt_tokens=1), latency=i / 1000
        )
    snap = acct.snapshot()
    assert snap["total"]["calls"] == 30_000 and snap["total"]["prompt_tokens"] == 30_000
    assert math.isclose(snap["total"]["latency_max"], 29.999, abs_tol=0.1)
    assert 12 < snap["by_member"]["m"]["latency_p50"] < 18


async def test_foreign_exception_from_a_member_is_a_bug_raised_at_once() -> None:
    bad = ScriptedMember("bad", [TypeError("unsupported operand")])
    good = ScriptedMember("good", [])
    async with BackendPool(
        {Role.TARGET: [MemberSpec(backend=bad), MemberSpec(backend=good)]}, retry=FAST
    ) as pool:
        with pytest.raises(TypeError):
            await pool.complete(req())
        stats = pool.accounting()
    assert bad.calls == 1 and good.calls == 0  # not retried on another member
    assert stats["total"]["failures"] == {} and stats["members"]["bad"]["breaker"] == "closed"
    assert bad.closed and good.closed


async def test_open_circuit_error_names_members_and_causes() -> None:
    errors: list[str | BaseException] = [
        RetryableBackendError("down", kind="server", status=503) for _ in range(3)
    ]
    member = ScriptedMember("only", errors)
    async with BackendPool(
        {Role.TARGET: [MemberSpec(backend=member)]},
        retry=FAST,
        breaker=BreakerPolicy(failure_threshold=2, cooldown=60),
    ) as pool:
        with pytest.raises(NoHealthyMemberError) as caught:
            await pool.complete(req())
    assert "only: server 503" in str(caught.value) and "next probe in" in str(caught.value)
    assert member.calls == 2


async def test_closed_pool_refuses_calls() -> None:
    pool = BackendPool({Role.TARGET: [MemberSpec(backend=ScriptedMember("m", []))]})
    await pool.aclose()
    await pool.aclose()
    with pytest.raises(NoHealthyMemberError):
        await pool.complete(req())


def test_two_members_with_one_name_are_refused() -> None:
    from skillopt.errors import ConfigError

    with pytest.raises(ConfigError):
        BackendPool(
            {
                Role.TARGET: [
                    MemberSpec(backend=ScriptedMember("x", [])),
                    MemberSpec(backend=ScriptedMember("x", [])),
                ]
            }
        )


async def test_from_config_builds_only_members_in_a_role_and_uses_the_disk_cache(
    tmp_path: Path,
) -> None:
    cfg = PoolConfig.model_validate(
        {
            "members": [
                {"kind": "mock", "name": "m"},
                # Unused, and it would fail to build (no such env var): it must be skipped.
                {
                    "kind": "openai",
                    "name": "unused",
                    "base_url": "http://127.0.0.1:9/v1",
                    "model": "x",
                    "api_key_env": "SKILLOPT_TEST_SURELY_UNSET",
                },
            ],
            "roles": {"target": ["m"], "optimizer": ["m"]},
            "cache": {"dir": str(tmp_path)},
        }
    )
    async with BackendPool.from_config(cfg) as pool:
        first = await pool.complete(req("hello"))
        second = await pool.complete(req("hello"))
        assert pool.members(Role.TARGET) == ["m"]
    assert not first.cached and second.cached and second.text == first.text
    assert (tmp_path / "responses.jsonl").exists()


class ContextRecordingMember(ScriptedMember):
    """Records the structlog context vars visible inside ``complete``."""

    def __init__(self, name: str) -> None:
        super().__init__(name, [])
        self.seen: list[dict[str, object]] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        import structlog

        self.seen.append(dict(structlog.contextvars.get_contextvars()))
        return await super().complete(request)


async def test_member_calls_run_with_bound_log_context() -> None:
    import structlog

    member = ContextRecordingMember("ctx")
    async with BackendPool({Role.TARGET: [MemberSpec(backend=member)]}) as pool:
        await pool.complete(req(stage="judge"))
    assert member.seen == [{"member": "ctx", "role": "target", "stage": "judge"}]
    assert structlog.contextvars.get_contextvars() == {}


async def test_open_circuit_mid_call_keeps_the_last_failure_as_cause() -> None:
    down = RetryableBackendError("down", kind="connection")
    member = ScriptedMember("solo", [down])
    async with BackendPool(
        {Role.TARGET: [MemberSpec(backend=member)]},
        retry=FAST,
        breaker=BreakerPolicy(failure_threshold=1, cooldown=60),
    ) as pool:
        with pytest.raises(NoHealthyMemberError) as caught:
            await pool.complete(req())
    assert isinstance(caught.value.__cause__, RetryableBackendError)
    assert caught.value.__cause__.member == "solo"


class SlowMember(ScriptedMember):
    def __init__(self, name: str, delay: float) -> None:
        super().__init__(name, [])
        self.delay = delay
        self.started = 0

    async def complete(self, request: CompletionRequest) -> Completion:
        self.started += 1
        await anyio.sleep(self.delay)
        return await super().complete(request)


async def test_cancelling_queued_callers_frees_every_slot() -> None:
    slow = SlowMember("slow", delay=30)
    async with BackendPool({Role.TARGET: [MemberSpec(backend=slow, max_concurrency=2)]}) as pool:
        with anyio.fail_after(20):  # generous: the machine may be busy; no fixed sleeps
            async with anyio.create_task_group() as tg:
                for i in range(500):
                    tg.start_soon(pool.complete, req(f"q{i}"))
                await anyio.wait_all_tasks_blocked()  # every caller has reached the gate
                queued = pool.accounting()["roles"]["target"]["waiting"]
                tg.cancel_scope.cancel()
        assert queued == 498
        assert slow.started == 2  # the rest waited at the gate without touching the member
        assert pool.accounting()["roles"]["target"] == {
            "members": ["slow"],
            "slots": 2,
            "waiting": 0,
        }
        assert pool.accounting()["members"]["slow"]["in_flight"] == 0
        slow.delay = 0
        with anyio.fail_after(30):
            result = await pool.complete(req("after"))
    assert result.text == "default"


async def test_callers_can_wait_for_an_open_member_to_recover() -> None:
    down = [RetryableBackendError("down", kind="server", status=503) for _ in range(2)]
    member = ScriptedMember("flaky", list(down))
    breaker = BreakerPolicy(failure_threshold=2, cooldown=0.3, max_wait=600.0)
    async with BackendPool(
        {Role.TARGET: [MemberSpec(backend=member, max_concurrency=4)]},
        retry=RetryPolicy(max_attempts=1),
        breaker=breaker,
    ) as pool:
        for _ in range(2):
            with pytest.raises(RetryableBackendError):
                await pool.complete(req(use_cache=False))
        started = anyio.current_time()
        results: list[Completion] = []

        async def one(i: int) -> None:
            results.append(await pool.complete(req(f"w{i}")))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for i in range(6):
                    tg.start_soon(one, i)
        waited = anyio.current_time() - started
    assert len(results) == 6 and {r.member for r in results} == {"flaky"}
    # waited for the 0.3 s cool-down, then all went through (the 60 s guard, not max_wait)
    assert waited >= 0.2
    assert member.calls == 2 + 6


async def test_waiting_for_recovery_gives_up_after_max_wait() -> None:
    down: list[str | BaseException] = [
        RetryableBackendError("down", kind="server", status=503) for _ in range(9)
    ]
    member = ScriptedMember("dead", down)
    breaker = BreakerPolicy(failure_threshold=1, cooldown=600.0, max_wait=0.3)
    async with BackendPool(
        {Role.TARGET: [MemberSpec(backend=member)]},
        retry=RetryPolicy(max_attempts=5, base_delay=0.0),
        breaker=breaker,
    ) as pool:
        started = anyio.current_time()
        with anyio.fail_after(60), pytest.raises(NoHealthyMemberError) as caught:
            await pool.complete(req())
        waited = anyio.current_time() - started
    # gave up after max_wait 0.3 s (the 60 s guard), not after the 600 s cool-down
    assert member.calls == 1 and waited >= 0.25
    assert isinstance(caught.value.__cause__, RetryableBackendError)


class RecordingMember(ScriptedMember):
    """Records the prompts in the order the member served them."""

    def __init__(self, name: str, outcomes: list[str | BaseException]) -> None:
        super().__init__(name, outcomes)
        self.order: list[str] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        self.order.append(request.prompt)
        await anyio.sleep(0.01)
        return await super().complete(request)


class StartClock(ScriptedMember):
    """Records the pool clock's reading as each call reaches the member."""

    def __init__(self, name: str) -> None:
        super().__init__(name, [])
        self.starts: list[float] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        self.starts.append(anyio.current_time())
        return await super().complete(request)


async def test_rpm_spaces_request_starts() -> None:
    """Starts are reserved 0.1 s apart on the clock the pool sleeps on, so the k-th start
    comes at least k intervals after the calls were made; a loaded machine can only make
    it later (timed at a server, a late first arrival made the gaps look short)."""
    member = StartClock("a")
    spec = MemberSpec(backend=member, max_concurrency=8, requests_per_minute=600)
    async with BackendPool({Role.TARGET: [spec]}) as pool, anyio.create_task_group() as tg:
        called = anyio.current_time()
        for i in range(4):
            tg.start_soon(pool.complete, req(f"r{i}"))
    after = [start - called for start in sorted(member.starts)]
    assert len(after) == 4, after
    assert all(t >= 0.1 * k - 1e-3 for k, t in enumerate(after)), after


async def test_retries_jump_the_queue_of_fresh_calls() -> None:
    member = RecordingMember("one", [RetryableBackendError("busy", kind="server", status=503)])
    async with (
        BackendPool(
            {Role.TARGET: [MemberSpec(backend=member, max_concurrency=1)]},
            retry=RetryPolicy(max_attempts=2, base_delay=0.0),
        ) as pool,
        anyio.create_task_group() as tg,
    ):
        for name in "ABCDEF":
            tg.start_soon(pool.complete, req(name))
            await anyio.lowlevel.checkpoint()  # queue them in this order
    assert member.order[:3] == ["A", "B", "A"], member.order
    assert sorted(member.order) == sorted("AABCDEF")


def test_a_memory_hit_returns_the_reply_as_served(tmp_path: Path) -> None:
    """A hit must be judged like the miss was: no text changed in memory, only on disk."""
    raw = "ok \x1b[31mred\x1b[0m sk-abcdefghijklmnopqrstu1234\r\n"
    path = tmp_path / "responses.jsonl"
    cache = ResponseCache(path, flush_every=1)
    cache.put("k", CachedReply(text=raw, usage=Usage(), member="a"))
    hit = cache.get("k")
    assert hit is not None and hit.text == raw
    on_disk = path.read_text()
    assert "\\u001b" not in on_disk and "sk-abcdefghijklmnopqrstu1234" not in on_disk


async def test_first_failover_to_a_free_member_skips_the_backoff() -> None:
    failing = ScriptedMember("a", [RetryableBackendError("busy", member="a", status=503)] * 2)
    healthy = ScriptedMember("b", [])
    roles = {Role.TARGET: [MemberSpec(backend=failing), MemberSpec(backend=healthy)]}
    policy = RetryPolicy(max_attempts=3, base_delay=30.0)  # a backoff would stall the test
    async with BackendPool(roles, retry=policy, rng=random.Random(1)) as pool:
        with capture_logs() as logs, anyio.fail_after(60):
            first = await pool.complete(req("x"))  # round-robin starts at "a"
    assert first.member == "b" and failing.calls == 1
    retries = [e for e in logs if e["event"] == "pool.retry"]
    assert [e["delay"] for e in retries] == [0.0]


async def test_a_lone_member_still_backs_off() -> None:
    alone = ScriptedMember("a", [RetryableBackendError("busy", member="a", status=503)])
    policy = RetryPolicy(max_attempts=2, base_delay=0.05)
    # Seeded: the full-jitter draw is uniform in [0, 0.05] and logged to 3 places, so an
    # unseeded pool rounds it to 0.0 about once in a hundred runs.
    members = {Role.TARGET: [MemberSpec(backend=alone)]}
    async with BackendPool(members, retry=policy, rng=random.Random(32)) as pool:
        with capture_logs() as logs:
            await pool.complete(req("x"))
    retries = [e for e in logs if e["event"] == "pool.retry"]
    assert len(retries) == 1 and retries[0]["delay"] > 0.0
