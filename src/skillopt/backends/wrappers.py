"""Completers that wrap a completer, in the style of an HTTP transport wrapping a transport.

Each wrapper does one job and forwards everything else to ``inner``, so a stack reads from
the outside in::

    BudgetCompleter          the night's spend cap (built per night)
      DrainingCompleter      a stop lets calls in flight finish and starts no new one
        RedactingCompleter   every text a request carries is redacted, here and only here
          BackendPool        retries, failover, limits, cache

:func:`skillopt.backends.open.open_completer` builds the lower part from config; a night adds
its own budget on top. :class:`StageCounter` is the trainer's deterministic per-stage tally
and wraps any completer (a bare member or fake as well as a pool).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any

import anyio

from skillopt.backends.base import (
    Completer,
    Completion,
    CompletionRequest,
    Message,
    Pool,
    Role,
    Usage,
)
from skillopt.errors import BudgetExceededError
from skillopt.redact import forget_memos, redact_text

__all__ = [
    "BudgetCompleter",
    "DrainingCompleter",
    "PoolWrapper",
    "RedactingCompleter",
    "StageCounter",
    "StageSpend",
    "forget_redactions",
    "prompt_tokens",
    "redact_request",
]


class PoolWrapper:
    """Base of the pool-shaped wrappers: forwards calls, accounting and capacity to ``inner``."""

    def __init__(self, inner: Pool) -> None:
        self.inner = inner

    async def complete(self, request: CompletionRequest) -> Completion:
        return await self.inner.complete(request)

    def accounting(self) -> dict[str, Any]:
        return self.inner.accounting()

    def total_concurrency(self, role: Role) -> int:
        return self.inner.total_concurrency(role)


# --------------------------------------------------------------------------- redaction


@functools.lru_cache(maxsize=2048)
def _redacted(text: str) -> str:
    """:func:`redact_text`, memoised: skills, memories and the K samples of one prompt recur
    thousands of times in a night, and redaction is a night's main CPU cost."""
    return redact_text(text)


def forget_redactions() -> None:
    """Empty the memo of redacted request texts (and the redaction memos under it): a
    long-lived process does it between jobs (see :func:`skillopt.redact.forget_memos`)."""
    _redacted.cache_clear()
    forget_memos()


def _redact_value(value: Any) -> Any:
    """Every string inside JSON-like ``value`` redacted; containers keep their type."""
    if isinstance(value, str):
        return _redacted(value)
    if isinstance(value, Mapping):
        return {key: _redact_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_redact_value(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_redact_value(item) for item in value)
    return value


def redact_request(request: CompletionRequest) -> CompletionRequest:
    """``request`` with every text it carries redacted: system, prompt, messages, and the
    metadata (CLI members write some of it, such as tool outputs, where the agent reads it)."""
    return replace(
        request,
        system=_redacted(request.system),
        prompt=_redacted(request.prompt),
        messages=tuple(
            Message(role=m.role, content=_redacted(m.content)) for m in request.messages
        ),
        metadata=_redact_value(request.metadata),
    )


class RedactingCompleter(PoolWrapper):
    """The one place outbound text is redacted: nothing below it sees a secret shape."""

    async def complete(self, request: CompletionRequest) -> Completion:
        return await self.inner.complete(redact_request(request))


# --------------------------------------------------------------------------- drain


class DrainingCompleter(PoolWrapper):
    """A wrapper a stop can drain: no new model call, the ones in flight finish.

    SIGTERM (a systemd stop, the daemon's shutdown) calls :meth:`drain`: new calls then wait
    until their caller is cancelled, while calls already in flight complete. Calls queue
    here, per role, up to the role's total concurrency, rather than inside the backend pool,
    so "in flight" means handed to the pool's members: when roles share members, at most one
    more round of the endpoints' capacity goes out after the stop.
    """

    def __init__(self, inner: Pool) -> None:
        super().__init__(inner)
        self._limiters: dict[Role, anyio.CapacityLimiter] = {}
        self._in_flight = 0
        self._draining = False
        self._idle = anyio.Event()

    def _limiter(self, role: Role) -> anyio.CapacityLimiter:
        limiter = self._limiters.get(role)
        if limiter is None:
            limiter = anyio.CapacityLimiter(max(1, self.inner.total_concurrency(role)))
            self._limiters[role] = limiter
        return limiter

    async def complete(self, request: CompletionRequest) -> Completion:
        async with self._limiter(request.role):
            if self._draining:
                await anyio.sleep_forever()  # no new work after a stop; cancelled with the caller
            self._in_flight += 1
            try:
                return await self.inner.complete(request)
            finally:
                self._in_flight -= 1
                if self._draining and not self._in_flight:
                    self._idle.set()

    async def drain(self) -> None:
        """Refuse new calls; return once none is in flight."""
        self._draining = True
        if not self._in_flight:
            self._idle.set()
        await self._idle.wait()


# --------------------------------------------------------------------------- budget


@dataclass(kw_only=True)
class StageSpend:
    """One stage's line of the night's ledger: model calls (failed ones included; a reply the
    response cache served is no call and is counted apart as a cache hit) and their tokens."""

    calls: int = 0
    cache_hits: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # part of prompt_tokens served from the provider's prompt cache
    estimated_tokens: int = 0  # part of the tokens a member estimated (it reported none)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "tokens": self.tokens}


class BudgetCompleter(PoolWrapper):
    """Enforces ``max_calls`` / ``max_tokens`` (0 = unlimited), checked before every request.

    Every request the pool sends counts, retries of unusable replies and transport retries
    included, with the tokens of every reply (the pool tells the request's meter, a
    :class:`SpendMeter`, of each; a completer below that is no pool is counted one call per
    answer). A request is refused with :class:`BudgetExceededError` once the cap is reached
    (a retry too: a cap is a cap), and so is one whose prompt alone (estimated from its
    text, :func:`prompt_tokens`) would take the tokens spent and in flight past
    ``max_tokens``: a huge prompt is refused, not paid for. Requests already in flight
    finish and are counted. Cached replies cost nothing and are not counted as calls;
    :attr:`stages` keeps them apart, with each stage's calls, tokens and provider-cached
    tokens (the ledger).

    A resumed night (a killed one, or a handoff night's next sitting) reads back what its
    earlier runs were answered: :meth:`carry` counts those calls and tokens where they are
    read back, so ``calls`` and ``tokens`` are the night's and the caps bound the night, as
    in one run; :meth:`summary` and :attr:`calls_this_run` give this run's own.
    """

    def __init__(self, inner: Pool, *, max_calls: int = 0, max_tokens: int = 0) -> None:
        super().__init__(inner)
        self.max_calls = max_calls
        self.max_tokens = max_tokens
        self.calls = 0
        self.tokens = 0
        self.failures = 0
        self.cached_tokens = 0  # part of ``tokens`` served from the provider's prompt cache
        self.stages: dict[str, StageSpend] = {}
        self.errors_by_class: Counter[str] = Counter()
        self.reached: str = ""  # "calls" or "tokens" once the cap stopped a call
        self.estimated_tokens = 0  # part of ``tokens`` a member estimated (reported none)
        self.in_flight_tokens = 0  # prompt tokens of the calls under way (not yet counted)
        self.caps = max_calls, max_tokens  # as configured (``holding_back`` lowers the live ones)
        self.holding = False
        self._reserves: list[tuple[int, int]] = []  # (calls, tokens) held back, one per holder
        self._full_caps = max_calls, max_tokens  # the caps ``holding_back`` lowered
        # (member, stage) -> [calls, tokens, estimated tokens]: what a token model learns from
        self.usage_by_member: dict[tuple[str, str], list[int]] = {}
        self.carried_calls = 0  # part of ``calls`` an earlier run of this night made
        self.carried_tokens = 0  # part of ``tokens`` likewise

    @property
    def exhausted(self) -> bool:
        return bool(self.reached)

    @property
    def calls_this_run(self) -> int:
        """The calls this run made (``calls`` less what earlier runs of the night made)."""
        return self.calls - self.carried_calls

    def carry(self, calls: int, tokens: int) -> None:
        """Count ``calls`` and ``tokens`` an earlier run of this night spent on a result
        read back now: the night's spend, against the caps, but no call of this run. A
        budget this one spends from (a child night's parent) carries them too."""
        self.calls += calls
        self.tokens += tokens
        self.carried_calls += calls
        self.carried_tokens += tokens
        if isinstance(self.inner, BudgetCompleter):
            self.inner.carry(calls, tokens)

    @contextmanager
    def holding_back(self, calls: int, tokens: int) -> Iterator[None]:
        """Lower the caps by ``calls`` / ``tokens`` for a while: a reserve for what must
        follow (a check that makes what was done count). Leaving normally restores the
        full caps and the reserve can be spent; an exception leaving it stays reached.
        Several learners on one budget (a night's skills) may hold back at once, in any
        order: the caps are lowered by every reserve still held."""
        if not self._reserves:
            self._full_caps = self.max_calls, self.max_tokens
        reserve = (calls, tokens)
        self._reserves.append(reserve)
        self._hold()
        try:
            yield
        finally:
            self._reserves.remove(reserve)
            self._hold()
        self.reached = ""

    def _hold(self) -> None:
        """The live caps: the full ones less every reserve held (never below 1)."""
        full_calls, full_tokens = self._full_caps
        self.holding = bool(self._reserves)
        if not self.holding:
            self.max_calls, self.max_tokens = full_calls, full_tokens
            return
        calls = sum(c for c, _ in self._reserves)
        tokens = sum(t for _, t in self._reserves)
        self.max_calls = max(1, full_calls - calls) if full_calls else 0
        self.max_tokens = max(1, full_tokens - tokens) if full_tokens else 0

    def _check(self, ahead: int) -> None:
        """Refuse the call when a cap is reached, or when its ``ahead`` prompt tokens would
        cross the token cap."""
        if self.max_calls and self.calls >= self.max_calls:
            self.reached = self.reached or "calls"
            why = self.stopped()
        elif self.max_tokens and self.tokens + self.in_flight_tokens + ahead > self.max_tokens:
            self.reached = self.reached or "tokens"
            why = self.stopped() + (
                f" (the next call's prompt alone is ~{ahead} tokens)"
                if self.tokens < self.max_tokens else ""
            )  # fmt: skip
        else:
            return
        raise BudgetExceededError(why)

    def spent(self) -> str:
        """What the night spent so far, for the line that says why it stopped."""
        earlier = (
            f" ({self.carried_calls} of the calls made before this run resumed the night)"
            if self.carried_calls else ""
        )  # fmt: skip
        return f"{self.calls} calls, {self.tokens} tokens spent{earlier}"

    def stopped(self) -> str:
        """Which cap stopped the night ("" while none did), with what was spent."""
        if not self.reached:
            return ""
        cap = self.caps[0] if self.reached == "calls" else self.caps[1]
        held = " (less the reserve held back for the final check)" if self.holding else ""
        return f"budget.max_{self.reached} = {cap} reached{held}: {self.spent()}"

    @property
    def cache_hits(self) -> int:
        """Replies the response cache served (no model call, no spend)."""
        return sum(row.cache_hits for row in self.stages.values())

    @property
    def calls_by_stage(self) -> dict[str, int]:
        """Model calls per stage (cache hits are no calls)."""
        return {name: row.calls for name, row in self.stages.items() if row.calls}

    def _stage(self, name: str) -> StageSpend:
        row = self.stages.get(name)
        if row is None:
            row = self.stages[name] = StageSpend()
        return row

    async def complete(self, request: CompletionRequest) -> Completion:
        ahead = prompt_tokens(request) if self.max_tokens else 0
        self._check(ahead)  # refused before it queues anywhere
        meter = _BudgetMeter(self, request.stage)
        self.in_flight_tokens += ahead  # its prompt, held until the call ends
        try:
            done = await self.inner.complete(replace(request, meters=(*request.meters, meter)))
        except Exception as exc:
            if meter.metered and meter.requests:
                raise  # each failed request was counted as it ended
            if not isinstance(exc, BudgetExceededError):
                # no pool below counted it (a bare completer), or nothing went out: the
                # failure is counted, as a call when a completer that is no pool made it
                self._failed(self._stage(request.stage), _error_class(exc))
                if not meter.metered:
                    self._sent(request.stage)
            raise
        finally:
            self.in_flight_tokens -= ahead
        if done.cached:
            self._stage(request.stage).cache_hits += 1
        elif not meter.metered:
            self._sent(request.stage)
            self._settle(request.stage, done.member, done.usage)
        return done

    def _sent(self, stage: str) -> None:
        self.calls += 1
        self._stage(stage).calls += 1

    def _failed(self, row: StageSpend, error: str) -> None:
        self.failures += 1
        row.failed += 1
        self.errors_by_class[error] += 1

    def _settle(self, stage: str, member: str, usage: Usage | None, error: str = "") -> None:
        """One request ended: its reply's tokens (when one came) and its failure."""
        row = self._stage(stage)
        if error:
            self._failed(row, error)
        if usage is None:
            return
        used = usage.total_tokens
        estimated = used if usage.estimated else 0
        self.tokens += used
        self.estimated_tokens += estimated
        self.cached_tokens += usage.cached_tokens
        row.prompt_tokens += usage.prompt_tokens
        row.completion_tokens += usage.completion_tokens
        row.cached_tokens += usage.cached_tokens
        row.estimated_tokens += estimated
        tally = self.usage_by_member.setdefault((member, stage), [0, 0, 0])
        tally[0] += 1
        tally[1] += used
        tally[2] += estimated

    def summary(self) -> dict[str, Any]:
        """This run's spend (what an earlier run of the night spent under ``carried``)."""
        carried = {"carried": {"calls": self.carried_calls, "tokens": self.carried_tokens}}
        return {
            "calls": self.calls_this_run,
            "tokens": self.tokens - self.carried_tokens,
            "failures": self.failures,
            "max_calls": self.max_calls,
            "max_tokens": self.max_tokens,
            "budget_reached": self.reached,
            "estimated_tokens": self.estimated_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_hits": self.cache_hits,
            "calls_by_stage": self.calls_by_stage,
            "stages": {name: row.to_dict() for name, row in sorted(self.stages.items())},
            "errors_by_class": dict(self.errors_by_class),
            **(carried if self.carried_calls or self.carried_tokens else {}),
        }


class _BudgetMeter:
    """One call's :class:`SpendMeter` for a :class:`BudgetCompleter`: each request the pool
    sends is checked against the caps and counted; its reply's tokens when it ends."""

    __slots__ = ("budget", "metered", "requests", "stage")

    def __init__(self, budget: BudgetCompleter, stage: str) -> None:
        self.budget = budget
        self.stage = stage
        self.metered = False  # a pool below counts this call's requests
        self.requests = 0

    def opened(self) -> None:
        self.metered = True

    def check(self, request: CompletionRequest) -> None:
        self.budget._check(0)  # the call's prompt is already held in flight

    def sent(self, request: CompletionRequest) -> None:
        self.requests += 1
        self.budget._sent(self.stage)

    def settled(self, *, member: str, usage: Usage | None, error: str) -> None:
        self.budget._settle(self.stage, member, usage, error)


def prompt_tokens(request: CompletionRequest) -> int:
    """The prompt tokens a request will cost at least, estimated from its text (about four
    characters a token, as a member that reports no usage is counted)."""
    return sum(len(m.content) for m in request.as_messages()) // 4


def _error_class(exc: BaseException) -> str:
    label = getattr(exc, "error_class", None)
    return str(label) if label else type(exc).__name__


# --------------------------------------------------------------------------- stage tally


class _StageMeter:
    """One call's :class:`SpendMeter` for a :class:`StageCounter`: each request the pool
    sends is counted as it goes out, and its reply's tokens when it ends (a request that
    failed, a reply rejected as unusable and a transport retry included)."""

    __slots__ = ("metered", "row")

    def __init__(self, row: dict[str, int]) -> None:
        self.row = row
        self.metered = False  # a pool below counts this call's requests

    def opened(self) -> None:
        self.metered = True

    def check(self, request: CompletionRequest) -> None:
        pass

    def sent(self, request: CompletionRequest) -> None:
        self.row["calls"] += 1

    def settled(self, *, member: str, usage: Usage | None, error: str) -> None:
        if usage is not None:
            self.row["prompt_tokens"] += usage.prompt_tokens
            self.row["completion_tokens"] += usage.completion_tokens
            self.row["cached_tokens"] += usage.cached_tokens


class StageCounter:
    """Counts calls and tokens per stage (deterministic accounting for the trainer).

    ``calls`` and the token counts are every request the pool sent, as it sent them (a
    :class:`SpendMeter` on each call): an unusable reply asked again, a transport retry and
    a call that failed outright included, so they equal what the server saw. A reply the
    response cache served costs nothing and is counted apart as ``cache_hits``. Over a
    completer that is no pool, a call counts as one request (``Completion.attempts`` and
    ``Completion.spent`` when it reports them)."""

    def __init__(self, inner: Completer, *, on_call: Callable[[str], None] | None = None) -> None:
        self.inner = inner
        self.stages: dict[str, dict[str, int]] = {}
        self._on_call = on_call

    def _row(self, stage: str) -> dict[str, int]:
        return self.stages.setdefault(
            stage,
            {
                "calls": 0,
                "cache_hits": 0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "cached_tokens": 0,
            },
        )

    async def complete(self, request: CompletionRequest) -> Completion:
        row = self._row(request.stage)
        meter = _StageMeter(row)
        try:
            completion = await self.inner.complete(
                replace(request, meters=(*request.meters, meter))
            )
        except Exception as exc:
            if not meter.metered and not isinstance(exc, BudgetExceededError):
                row["calls"] += 1  # no pool below: the failed call was one request
            raise
        if completion.cached:
            row["cache_hits"] += 1
        elif not meter.metered:
            usage = completion.spent or completion.usage
            row["calls"] += max(1, completion.attempts)
            row["prompt_tokens"] += usage.prompt_tokens
            row["completion_tokens"] += usage.completion_tokens
            row["cached_tokens"] += usage.cached_tokens
        if self._on_call is not None:
            self._on_call(request.stage)
        return completion

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {stage: dict(row) for stage, row in sorted(self.stages.items())}

    @staticmethod
    def delta(
        before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]
    ) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for stage, row in after.items():
            base = before.get(stage, {})
            diff = {k: v - base.get(k, 0) for k, v in row.items()}
            if any(diff.values()):
                out[stage] = diff
        return out
