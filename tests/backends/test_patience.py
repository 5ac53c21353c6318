"""A night's patience: when every member of a role has an open circuit, calls wait for the
earliest half-open probe (within the night's budget) instead of failing at once.

Before: at 40% transient faults every circuit opened, every call queued behind them failed
at once with ``NoHealthyMemberError``, the stage failed and the night exited 1.
"""

from __future__ import annotations

import anyio
import anyio.lowlevel

from skillopt.backends.base import Completion, CompletionRequest, Role, Usage
from skillopt.backends.patience import Patience, patience_for
from skillopt.backends.pool import BackendPool, BreakerPolicy, MemberSpec
from skillopt.backends.retry import RetryPolicy
from skillopt.errors import (
    BackendAuthError,
    BackendError,
    NoHealthyMemberError,
    RetryableBackendError,
)


class Stormy:
    """A member whose first ``failures`` calls fail with a transient 503 (or ``error``)."""

    def __init__(self, name: str, failures: int, error: Exception | None = None) -> None:
        self._name = name
        self.failures = failures
        self.error = error
        self.calls = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return "stormy"

    async def complete(self, request: CompletionRequest) -> Completion:
        self.calls += 1
        await anyio.lowlevel.checkpoint()
        if self.calls <= self.failures:
            raise self.error or RetryableBackendError("storm", kind="server", status=503)
        return Completion(text="ok", usage=Usage(completion_tokens=1), member="", latency=0)

    async def aclose(self) -> None:
        return None


def _pool(*members: Stormy) -> BackendPool:
    return BackendPool(
        {Role.TARGET: [MemberSpec(backend=m, max_concurrency=4) for m in members]},
        retry=RetryPolicy(max_attempts=2, base_delay=0.0, max_delay=0.0),
        breaker=BreakerPolicy(failure_threshold=2, cooldown=0.1),
    )


async def _fan_out(pool: BackendPool, n: int) -> tuple[int, list[BaseException]]:
    ok, failed = 0, []

    async def one(i: int) -> None:
        nonlocal ok
        try:
            request = CompletionRequest(role=Role.TARGET, prompt=f"p{i}", use_cache=False)
            await pool.complete(request)
            ok += 1
        except (NoHealthyMemberError, BackendError) as exc:
            failed.append(exc)

    async with anyio.create_task_group() as group:
        for i in range(n):
            group.start_soon(one, i)
    return ok, failed


async def test_without_patience_a_storm_fails_the_calls_queued_behind_open_circuits() -> None:
    async with _pool(Stormy("a", 6), Stormy("b", 6)) as pool:
        ok, failed = await _fan_out(pool, 24)
    assert any(isinstance(e, NoHealthyMemberError) for e in failed) and ok < 24


async def test_with_patience_every_call_waits_for_the_probe_and_the_storm_passes() -> None:
    patience = Patience(30)
    async with _pool(Stormy("a", 6), Stormy("b", 6)) as pool:
        with patience_for(patience), anyio.fail_after(30):
            ok, failed = await _fan_out(pool, 24)
    assert ok == 24 - len(failed)
    # only calls that ran out of attempts before their circuit opened may fail
    assert not [e for e in failed if isinstance(e, NoHealthyMemberError)], failed
    assert patience.episodes >= 1 and 0 < patience.spent() < 5


async def test_spent_patience_fails_the_calls_and_counts_waiters_once() -> None:
    patience = Patience(0.3)
    async with _pool(Stormy("dead", 10_000)) as pool:
        with patience_for(patience), anyio.fail_after(30):
            ok, failed = await _fan_out(pool, 12)
    assert ok == 0 and any(isinstance(e, NoHealthyMemberError) for e in failed)
    assert any("patience" in str(e) for e in failed)
    # twelve callers waited together, in one episode: the budget is spent once, not twelve
    # times over (3.6 s); the wide margin is a loaded machine's late wake-ups
    assert patience.episodes == 1 and 0.25 <= patience.spent() < 12 * 0.3 / 2


async def test_open_circuits_a_wait_cannot_cure_fail_at_once() -> None:
    patience = Patience(60)
    auth = BackendAuthError("bad key", status=401)
    async with _pool(Stormy("locked", 10_000, error=auth)) as pool:
        with patience_for(patience), anyio.fail_after(10):
            ok, failed = await _fan_out(pool, 6)
    assert ok == 0 and failed and patience.episodes == 0


def test_patience_is_not_negative() -> None:
    assert Patience(-5).budget == 0


async def test_zero_patience_fails_at_once() -> None:
    async with _pool(Stormy("a", 6), Stormy("b", 6)) as pool:
        with patience_for(Patience(0)):
            _, failed = await _fan_out(pool, 24)
    assert any(isinstance(e, NoHealthyMemberError) for e in failed)


def _refusing(name: str) -> Stormy:
    """A member whose endpoint refuses every connection (the classified SDK failure)."""
    from skillopt.backends.retry import classify_exception

    error = classify_exception(ConnectionRefusedError(111, "Connection refused"), member=name)
    assert isinstance(error, BackendError) and error.error_class == "refused"
    return Stormy(name, 10_000, error=error)


async def test_a_foreground_patience_does_not_wait_when_every_member_refuses() -> None:
    async with _pool(_refusing("a"), _refusing("b")) as pool:
        with patience_for(Patience(600.0, wait_when_refused=False)) as patience:
            ok, failed = await _fan_out(pool, 12)
    assert ok == 0 and patience.episodes == 0
    assert any("refused the connection" in str(e) for e in failed)


async def test_the_daemon_patience_still_waits_on_refusals_and_everyone_on_a_storm() -> None:
    async with _pool(_refusing("a"), _refusing("b")) as pool:
        with patience_for(Patience(0.3)) as patience, anyio.fail_after(30):
            ok, _ = await _fan_out(pool, 12)
    assert ok == 0 and patience.episodes >= 1  # waited for a probe before giving up
    async with _pool(Stormy("a", 6), Stormy("b", 6)) as pool:
        with patience_for(Patience(600.0, wait_when_refused=False)) as patience:
            ok, failed = await _fan_out(pool, 24)
    assert not [e for e in failed if isinstance(e, NoHealthyMemberError)], failed
    assert ok == 24 - len(failed) and patience.episodes >= 1  # a 503 storm is waited out
