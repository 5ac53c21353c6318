"""BackendPool: fan model calls out over the members of a role, within every member's limits.

How one :meth:`BackendPool.complete` call proceeds:

1. Cache lookup (unless ``request.use_cache`` is False); a request identical to one in
   flight waits for that call and shares its reply (:mod:`skillopt.backends.single_flight`).
2. Take a slot of the role's gate, as wide as the sum of its members' concurrency.
   Thousands of callers wait here in FIFO order at no CPU cost; a release hands the slot
   to exactly one waiter, retries first (so a retried call does not queue again behind
   the whole backlog).
3. Pick a member round-robin among members whose breaker admits calls and whose own
   limiter has room (avoiding the member that just failed this call when possible). Only
   if none has room (a member shared by two roles, or an open member's share of the
   gate) does the caller wait on the next member's limiter.
4. Respect the member's requests-per-minute spacing, then call it under ``fail_after``.
   Right before the request goes out, the request's spend meters (a budget above the
   pool) may refuse it, and are told of it; when it ends, of its usage (an unusable reply's
   included) and failure: every request sent, retries included, is counted and capped.
5. A reply the request's ``check_reply`` rejects is a failed call (kind ``bad_reply``).
   An exception that is not a :class:`BackendError` is a bug: logged with its traceback
   and raised at once, never retried.
6. On a retryable failure: release the slots, sleep the policy delay (``Retry-After``
   honoured), and try again, which naturally fails over to the next member. The first
   retry skips the backoff when another healthy member has a free slot: backoff exists
   to spare the member that failed, and the call is not going back to it. Fatal
   failures (auth, bad request, content filter) are raised at once.

No task is spawned per call, so cancelling the caller cancels the in-flight request and
leaves nothing running.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
from structlog.contextvars import bound_contextvars

from skillopt.backends.accounting import Accounting
from skillopt.backends.base import Backend, Completion, CompletionRequest, Role, Usage
from skillopt.backends.breaker import Breaker, BreakerPolicy, BreakerState
from skillopt.backends.cache import CachedReply, ResponseCache, cache_key
from skillopt.backends.metering import CallUsage, OutRequests, admit, settle
from skillopt.backends.patience import current_patience
from skillopt.backends.retry import RetryPolicy, retry_delay, short_cause
from skillopt.backends.single_flight import SingleFlight
from skillopt.errors import (
    BackendAuthError,
    BackendError,
    BackendTimeoutError,
    ConfigError,
    NoHealthyMemberError,
    QuotaExhaustedError,
    ReplyFormatError,
    RetryableBackendError,
)
from skillopt.logging import get_logger

if TYPE_CHECKING:
    from skillopt.config import PoolConfig

__all__ = ["BackendPool", "BreakerPolicy", "BreakerState", "MemberSpec"]

_log = get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class MemberSpec:
    """One member as the pool sees it."""

    backend: Backend
    max_concurrency: int = 8
    requests_per_minute: float | None = None
    timeout: float = 120.0


class _RateSpacer:
    """Spaces call starts ``60/rpm`` seconds apart by reserving start times (no polling)."""

    def __init__(self, rpm: float) -> None:
        self._interval = 60.0 / rpm
        self._next = -math.inf

    async def wait_turn(self) -> None:
        now = anyio.current_time()
        start = max(now, self._next)
        self._next = start + self._interval
        if start > now:
            await anyio.sleep_until(start)


class _Waiter:
    __slots__ = ("event", "granted")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.granted = False


class _Gate:
    """A role's slots: FIFO waiters, with a priority lane for retries.

    A released slot is handed straight to the next waiter (retries first), so a waiter
    that wakes up owns its slot and nobody can barge in between. Waiters live in ordered
    dicts: O(1) to append, hand over, and remove on cancellation.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self._free = total
        self._retries: OrderedDict[_Waiter, None] = OrderedDict()
        self._fresh: OrderedDict[_Waiter, None] = OrderedDict()

    @property
    def waiting(self) -> int:
        return len(self._retries) + len(self._fresh)

    async def acquire(self, *, retry: bool) -> None:
        if self._free > 0:
            self._free -= 1
            return
        waiter = _Waiter()
        queue = self._retries if retry else self._fresh
        queue[waiter] = None
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.granted:
                self.release()  # cancelled after the hand-over: pass the slot on
            else:
                del queue[waiter]
            raise

    def release(self) -> None:
        for queue in (self._retries, self._fresh):
            if queue:
                waiter, _ = queue.popitem(last=False)
                waiter.granted = True
                waiter.event.set()
                return
        self._free += 1


class _Member:
    def __init__(self, spec: MemberSpec, breaker: BreakerPolicy) -> None:
        self.spec = spec
        self.name = spec.backend.name
        self.limiter = anyio.CapacityLimiter(spec.max_concurrency)
        self.spacer = _RateSpacer(spec.requests_per_minute) if spec.requests_per_minute else None
        self.breaker = Breaker(breaker)
        self.last_error = ""
        self.curable = True  # the last failure was one a wait can cure (not auth, not quota)
        self.refused = False  # the last failure: the endpoint refused the connection
        self.rest_until = -math.inf  # set from a Retry-After hint: others go first until then

    def has_room(self) -> bool:
        return self.limiter.available_tokens >= 1


class _RoleGroup:
    def __init__(self, role: Role, members: list[_Member]) -> None:
        self.role = role
        self.members = members
        self.gate = _Gate(sum(m.spec.max_concurrency for m in members))
        self.cursor = itertools.count()
        names = sorted({_signature(m.spec.backend, role) for m in members})
        self.model_signature = ",".join(names)


def _signature(backend: Backend, role: Role) -> str:
    """A member's model and the request settings it sends for ``role`` (the cache key's)."""
    settings = getattr(backend, "request_signature", None)
    extra = settings(role) if callable(settings) else ""
    return f"{backend.model}{extra and '|' + extra}"


async def _acquire(limiter: anyio.CapacityLimiter) -> None:
    """Take a token; only an unavailable token costs a trip through the event loop.

    ``CapacityLimiter.acquire`` always yields twice (cancel check + shielded checkpoint)
    even when a token is free; with thousands of calls that is measurable loop work.
    """
    try:
        limiter.acquire_nowait()
    except anyio.WouldBlock:
        await limiter.acquire()


# Retryable failures that say nothing about the member's health: it answered.
_HEALTHY_KINDS = frozenset({"rate_limit", "bad_reply", "too_large", "format_unsupported"})


def _breaker_counts(error: BackendError) -> bool:
    """Failures that say the member is unhealthy (not that the request was bad).

    A rate limit is not one: the member works and asked us to slow down (its Retry-After
    rests it). Opening the circuit would fail every queued call at once instead. Nor is a
    reply the caller's check rejects or one over its size cap, nor a reply format the
    endpoint does not take (asked again in a weaker one): the endpoint answered, and
    one kind of request (a judgement, a mining prompt) must not shut the member for all.
    """
    if isinstance(error, RetryableBackendError) and error.kind in _HEALTHY_KINDS:
        return False
    return error.retryable or isinstance(error, BackendAuthError | QuotaExhaustedError)


class BackendPool:
    """Round-robin, limit-respecting, retrying dispatcher over the members of each role."""

    def __init__(
        self,
        roles: Mapping[Role, Sequence[MemberSpec]],
        *,
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen, immutable default
        breaker: BreakerPolicy = BreakerPolicy(),  # noqa: B008 - frozen, immutable default
        cache: ResponseCache | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._retry = retry
        self._cache = cache
        self._flights = SingleFlight()
        self._rng = rng or random.Random()
        self._accounting = Accounting()
        self._members: dict[str, _Member] = {}
        self._groups: dict[Role, _RoleGroup] = {}
        self._closers: list[Any] = []
        self._closed = False
        self._max_wait = breaker.max_wait
        self._health_changed: anyio.Event | None = None  # created in the loop, on demand
        self._out = OutRequests()  # the requests out now, for a live display
        for role, specs in roles.items():
            if not specs:
                raise ConfigError("a role needs at least one member", key=f"roles.{role}")
            group_members: list[_Member] = []
            for spec in specs:
                if spec.max_concurrency < 1:
                    raise ConfigError(
                        "must be >= 1", key=f"members.{spec.backend.name}.max_concurrency"
                    )
                member = self._members.get(spec.backend.name)
                if member is None:
                    member = self._members[spec.backend.name] = _Member(spec, breaker)
                elif member.spec is not spec and member.spec.backend is not spec.backend:
                    raise ConfigError(
                        f"two different members are named {spec.backend.name!r}", key="members"
                    )
                if member not in group_members:
                    group_members.append(member)
            self._groups[Role(role)] = _RoleGroup(Role(role), group_members)

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_config(
        cls, cfg: PoolConfig, *, extra_backends: Mapping[str, Backend] | None = None
    ) -> BackendPool:
        """Build every member from config; ``extra_backends`` replaces members by name."""
        from skillopt.backends.factory import build_member, needs_http_client

        extra = dict(extra_backends or {})
        used = set(cfg.roles.target) | set(cfg.roles.optimizer)
        http_members = [
            m
            for m in cfg.members
            if m.name in used and m.name not in extra and needs_http_client(m)
        ]
        http_client = None
        if http_members:  # the HTTP client stack is imported only when a member needs it
            from skillopt.backends.http.member import make_http_client

            http_client = make_http_client(
                max_connections=sum(m.max_concurrency for m in http_members)
            )
        built: dict[str, MemberSpec] = {}
        for member_cfg in cfg.members:
            if member_cfg.name not in used:
                continue  # configured but in no role: never built, never connected
            backend = extra.get(member_cfg.name) or build_member(
                member_cfg, http_client=http_client
            )
            built[member_cfg.name] = MemberSpec(
                backend=backend,
                max_concurrency=member_cfg.max_concurrency,
                requests_per_minute=member_cfg.requests_per_minute,
                timeout=member_cfg.timeout,
            )
        roles = {
            Role.TARGET: [built[n] for n in cfg.roles.target],
            Role.OPTIMIZER: [built[n] for n in cfg.roles.optimizer],
        }
        cache = None
        if cfg.cache.enabled:
            cache_path = cfg.cache.dir / "responses.jsonl" if cfg.cache.dir else None
            cache = ResponseCache(cache_path, max_entries=cfg.cache.max_entries)
        pool = cls(
            roles,
            retry=RetryPolicy(
                max_attempts=cfg.retry.max_attempts,
                base_delay=cfg.retry.base_delay,
                max_delay=cfg.retry.max_delay,
                retry_after_cap=cfg.retry.retry_after_cap,
            ),
            breaker=BreakerPolicy(
                failure_threshold=cfg.breaker.failure_threshold,
                cooldown=cfg.breaker.cooldown,
                max_wait=cfg.breaker.max_wait,
            ),
            cache=cache,
        )
        if http_client is not None:
            pool._closers.append(http_client)
        return pool

    # ----------------------------------------------------------------- public API
    def total_concurrency(self, role: Role) -> int:
        """How many calls of ``role`` can be in flight at once (size your fan-out to this)."""
        return self._group(role).gate.total

    def members(self, role: Role) -> list[str]:
        return [m.name for m in self._group(role).members]

    def breaker_state(self, member: str) -> BreakerState:
        return self._members[member].breaker.state(anyio.current_time())

    def in_flight(self) -> tuple[int, str, float]:
        """Requests out now, the member the oldest waits on, and for how long (seconds)."""
        return self._out.view(anyio.current_time())

    def reset_accounting(self) -> None:
        """Start the call accounting over: a long-lived process's next job (the daemon's
        next night) then reports its own calls, and the latency reservoirs stay that job's."""
        self._accounting = Accounting()

    def accounting(self) -> dict[str, Any]:
        """Plain JSON-able diagnostics: totals, per member / role / stage, breaker states."""
        snap = self._accounting.snapshot()
        try:
            now: float | None = anyio.current_time()
        except RuntimeError:  # called outside an event loop (e.g. writing a report)
            now = None
        snap["members"] = {
            name: {
                "max_concurrency": m.spec.max_concurrency,
                "in_flight": int(m.limiter.borrowed_tokens),
                "breaker": m.breaker.state(now).value if now is not None else None,
                "times_opened": m.breaker.times_opened,
            }
            for name, m in sorted(self._members.items())
        }
        snap["roles"] = {
            role.value: {
                "members": [m.name for m in group.members],
                "slots": group.gate.total,
                "waiting": group.gate.waiting,
            }
            for role, group in self._groups.items()
        }
        if self._cache is not None:
            snap["cache"] = {
                "entries": len(self._cache),
                "hits": self._cache.hits,
                "misses": self._cache.misses,
            }
        return snap

    async def complete(self, request: CompletionRequest) -> Completion:
        """One completion for ``request.role``, retried and failed over per the policy.

        Raises a :class:`FatalBackendError` subclass at once for auth / bad request /
        content filter, the last :class:`RetryableBackendError` when attempts run out, and
        :class:`NoHealthyMemberError` when every member of the role has an open circuit.
        """
        if self._closed:
            raise NoHealthyMemberError("the pool is closed")
        for meter in request.meters:
            meter.opened()
        group = self._group(request.role)
        role, stage = group.role.value, request.stage
        if self._cache is None or not request.use_cache:
            return await self._run_with_retries(group, request)
        key = cache_key(role=role, model=group.model_signature, request=request)
        hit = self._cache.get(key)
        if hit is None:
            shared = await self._flights.shared(key)
            if shared is not None:
                hit = CachedReply(text=shared.text, usage=shared.usage, member=shared.member)
        if hit is not None and _usable(request, hit.text):
            self._accounting.cache_hit(role=role, stage=stage)
            return Completion(
                text=hit.text,
                usage=hit.usage,
                member=hit.member,
                latency=0.0,
                attempts=0,
                cached=True,
            )
        with self._flights.leading(key) as flight:
            completion = await self._run_with_retries(group, request)
            flight.result = completion
        self._cache.put(
            key,
            CachedReply(text=completion.text, usage=completion.usage, member=completion.member),
        )
        return completion

    async def aclose(self) -> None:
        """Close every member and the shared HTTP client. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._cache is not None:
            try:
                self._cache.flush()
            except OSError as exc:  # a cache is an optimisation: say so, do not fail close
                _log.warning("pool.cache_flush_failed", error=short_cause(exc))
        with anyio.CancelScope(shield=True):
            closers = [m.spec.backend for m in self._members.values()] + self._closers
            for closer in closers:
                try:
                    await closer.aclose()
                except Exception as exc:  # one bad member must not leak the others
                    _log.warning("pool.close_failed", error=short_cause(exc))

    async def __aenter__(self) -> BackendPool:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ----------------------------------------------------------------- internals
    def _group(self, role: Role) -> _RoleGroup:
        try:
            return self._groups[Role(role)]
        except (KeyError, ValueError) as exc:
            raise NoHealthyMemberError(f"the pool has no members for role {role!r}") from exc

    def _can_fail_over(self, group: _RoleGroup, failed: str | None) -> bool:
        """Another member is closed-circuit, not resting, and has a free slot right now."""
        now = anyio.current_time()
        return any(
            m.name != failed
            and m.breaker.state(now) is BreakerState.CLOSED
            and m.rest_until <= now
            and m.has_room()
            for m in group.members
        )

    def _pick(self, group: _RoleGroup, avoid: str | None) -> _Member | None:
        """Next admitted member with room, round-robin; else a full one; None if all are open.

        Members resting after a ``Retry-After`` hint, and the member that just failed this
        call, are used only when nothing else is admitted.
        """
        now = anyio.current_time()
        count = len(group.members)
        start = next(group.cursor) % count
        order = [group.members[(start + i) % count] for i in range(count)]
        admitted = [m for m in order if m.breaker.admits(now)]
        if not admitted:
            return None
        awake = [m for m in admitted if m.rest_until <= now] or admitted
        preferred = [m for m in awake if m.name != avoid] or awake
        for member in preferred:
            if member.has_room():
                return member
        return preferred[0]

    async def _run_with_retries(self, group: _RoleGroup, request: CompletionRequest) -> Completion:
        role, stage = group.role.value, request.stage
        last_error: BackendError | None = None
        avoid: str | None = None
        spent = CallUsage()  # a meter of its own: what this call's requests used
        request = replace(request, meters=(*request.meters, spent))
        for attempt in range(1, self._retry.max_attempts + 1):
            try:
                done = await self._attempt(group, request, attempt, avoid)
                return replace(done, spent=spent.usage)
            except NoHealthyMemberError as exc:
                if last_error is None:
                    raise
                raise exc from last_error  # keep the failure that opened the last circuit
            except RetryableBackendError as error:
                last_error, avoid = error, error.member or None
                if attempt >= self._retry.max_attempts:
                    break
                delay = retry_delay(
                    self._retry, attempt, retry_after=error.retry_after, rng=self._rng
                )
                if attempt == 1 and error.retry_after is None and self._can_fail_over(group, avoid):
                    # Backoff protects the member that failed; a healthy member with room
                    # needs no protection, so the first failover goes out at once.
                    delay = 0.0
                self._accounting.retry(member=error.member, role=role, stage=stage)
                _log.warning(
                    "pool.retry",
                    member=error.member,
                    status=error.status,
                    error=error.error_class,
                    cause=error.cause,
                    attempt=attempt,
                    delay=round(delay, 3),
                    role=role,
                    stage=stage,
                )
                await anyio.sleep(delay)
        assert last_error is not None
        raise last_error

    async def _attempt(
        self, group: _RoleGroup, request: CompletionRequest, attempt: int, avoid: str | None
    ) -> Completion:
        role, stage = group.role.value, request.stage
        gate = group.gate
        await gate.acquire(retry=attempt > 1)
        try:
            member = self._pick(group, avoid)
            if member is None:
                member = await self._wait_for_health(group, avoid)
            if member is None:
                self._accounting.failure(
                    member=None, role=role, stage=stage, error_class="no_member"
                )
                raise NoHealthyMemberError(self._all_open_message(group))
            # Claim the half-open probe before any await, so no other caller picks the
            # same member as a second probe while this one waits for its turn.
            probe = member.breaker.on_start(anyio.current_time())
            try:
                await _acquire(member.limiter)
            except BaseException:
                if probe and member.breaker.on_abandon():
                    self._notify_health()
                raise
            try:
                if member.spacer is not None:
                    await member.spacer.wait_turn()
                return await self._call_member(member, group, request, attempt)
            except anyio.get_cancelled_exc_class():
                if probe and member.breaker.on_abandon():
                    self._notify_health()
                raise
            finally:
                member.limiter.release()
        finally:
            gate.release()

    def _notify_health(self) -> None:
        """Wake callers waiting for a member to recover (a breaker changed state)."""
        if self._health_changed is not None:
            self._health_changed.set()
            self._health_changed = None

    async def _wait_for_health(self, group: _RoleGroup, avoid: str | None) -> _Member | None:
        """Every member is open: wait for a probe slot or a recovery, as long as the
        patience in effect allows (a night's, see :mod:`.patience`), else ``max_wait``.

        Sleeps until the earliest cool-down ends or a breaker changes state, whichever is
        first; no polling. Returns None when the wait is over without a usable member, or
        at once when every member was opened by a failure that waiting cannot cure
        (credentials, exhausted quota).
        """
        if not any(m.curable for m in group.members):
            return None
        patience = current_patience()
        if patience is not None and not patience.wait_when_refused and _all_refused(group):
            return None
        now = anyio.current_time()
        limit = self._max_wait if patience is None else patience.remaining(now)
        if limit <= 0:
            return None
        if patience is None:
            return await self._wait_until(group, avoid, now + limit)
        with patience.waiting() as first:
            if first:
                _log.warning(
                    "pool.waiting_for_recovery",
                    role=group.role.value,
                    patience_left=round(limit, 1),
                    members=", ".join(f"{m.name}: {m.last_error or '?'}" for m in group.members),
                )
            return await self._wait_until(group, avoid, now + limit)

    async def _wait_until(
        self, group: _RoleGroup, avoid: str | None, deadline: float
    ) -> _Member | None:
        while True:
            now = anyio.current_time()
            if now >= deadline:
                return None
            reopen = min(
                (t for m in group.members if (t := m.breaker.reopens_at()) is not None),
                default=deadline,
            )
            wake_at = min(deadline, reopen) if reopen > now else deadline
            if self._health_changed is None:
                self._health_changed = anyio.Event()
            changed = self._health_changed
            with anyio.CancelScope(deadline=wake_at):
                await changed.wait()
            member = self._pick(group, avoid)
            if member is not None:
                return member

    def _all_open_message(self, group: _RoleGroup) -> str:
        now = anyio.current_time()
        reopen = min(
            (t for m in group.members if (t := m.breaker.reopens_at()) is not None), default=None
        )
        causes = ", ".join(f"{m.name}: {m.last_error or '?'}" for m in group.members)
        if _all_refused(group):
            names = ", ".join(m.name for m in group.members)
            return (
                f"every member of role {group.role.value!r} refused the connection ({names}): "
                "is the model server running at the configured base_url?"
            )
        text = f"every member of role {group.role.value!r} has an open circuit ({causes})"
        if reopen is not None:
            text += f"; next probe in {max(0.0, reopen - now):.1f}s"
        patience = current_patience()
        if patience is not None and patience.budget and not patience.remaining(now):
            text += f"; the night's patience ({patience.budget:g}s of waiting) is spent"
        return text

    async def _call_member(
        self, member: _Member, group: _RoleGroup, request: CompletionRequest, attempt: int
    ) -> Completion:
        role, stage = group.role.value, request.stage
        timeout = request.timeout if request.timeout is not None else member.spec.timeout
        breaker = member.breaker
        try:
            admit(request)  # a budget's cap refuses the request before it goes out
        except BaseException:
            if breaker.on_abandon():
                self._notify_health()
            raise
        self._accounting.attempt(member=member.name, role=role, stage=stage)
        started = anyio.current_time()
        out_key = self._out.start(member.name, started)
        usage: Usage | None = None
        error_class = ""  # a cancelled request was sent and is counted, but no failure
        try:
            # The member's own log lines carry member/role/stage via contextvars.
            with (
                bound_contextvars(member=member.name, role=role, stage=stage),
                anyio.fail_after(timeout),
            ):
                result = await member.spec.backend.complete(request)
            usage = result.usage
            if not result.text.strip():
                raise RetryableBackendError(
                    "empty completion", kind="empty", member=member.name, cause="empty reply"
                )
            _check_reply(request, result.text, member.name)
        except TimeoutError as exc:
            error: BackendError = BackendTimeoutError(
                f"no reply within {timeout:g}s", member=member.name, cause="pool timeout"
            )
            error_class = error.error_class
            self._record_failure(member, role, stage, error)
            raise error from exc
        except BackendError as exc:
            error = exc if exc.member else _with_member(exc, member.name)
            error_class = error.error_class
            self._record_failure(member, role, stage, error, usage)
            if error is exc:
                raise
            raise error from exc
        except anyio.get_cancelled_exc_class():
            if breaker.on_abandon():
                self._notify_health()
            raise
        except Exception:
            # Members turn every transport and protocol failure into a BackendError, so
            # anything else is a bug (ours or the member's): not an outage, never retried,
            # not held against the member's health; it fails fast with its traceback.
            if breaker.on_abandon():
                self._notify_health()
            _log.exception("pool.member_bug", member=member.name, role=role, stage=stage)
            error_class = "bug"
            raise
        else:
            error_class = ""
        finally:
            self._out.end(out_key)
            settle(request, member=member.name, usage=usage, error=error_class)
        return self._answered(member, role, stage, attempt, result, started)

    def _answered(
        self, member: _Member, role: str, stage: str, attempt: int, result: Completion, start: float
    ) -> Completion:
        """A member's usable answer: its breaker, accounting and log line, as the pool's."""
        latency = anyio.current_time() - start
        if member.breaker.on_success():
            self._notify_health()
        self._accounting.success(
            member=member.name, role=role, stage=stage, usage=result.usage, latency=latency
        )
        _log.debug(
            "pool.call",
            member=member.name,
            role=role,
            stage=stage,
            attempt=attempt,
            latency=round(latency, 4),
            prompt_tokens=result.usage.prompt_tokens,
            completion_tokens=result.usage.completion_tokens,
        )
        return Completion(
            text=result.text,
            usage=result.usage,
            member=member.name,
            latency=latency,
            attempts=attempt,
            cached=False,
            tools_called=result.tools_called,
            raw=result.raw,
        )

    def _record_failure(
        self,
        member: _Member,
        role: str,
        stage: str,
        error: BackendError,
        usage: Usage | None = None,
    ) -> None:
        self._accounting.failure(
            member=member.name, role=role, stage=stage, error_class=error.error_class, usage=usage
        )
        now = anyio.current_time()
        status = f" {error.status}" if error.status is not None else ""
        member.last_error = f"{error.error_class}{status}"
        member.refused = error.error_class == "refused"
        if error.retry_after is not None:
            rest = min(error.retry_after, self._retry.retry_after_cap)
            member.rest_until = max(member.rest_until, now + rest)
        if _breaker_counts(error):
            member.curable = error.retryable
            if member.breaker.on_failure(now):
                self._notify_health()
                reopens = member.breaker.reopens_at() or now
                _log.warning(
                    "pool.breaker_open", member=member.name, reopens_in=round(reopens - now, 3)
                )
        elif member.breaker.on_abandon():
            self._notify_health()


def _all_refused(group: _RoleGroup) -> bool:
    return all(m.refused for m in group.members)


def _check_reply(request: CompletionRequest, text: str, member: str) -> None:
    """An unusable reply (the request's own check says so) is a failed, retryable call."""
    if request.check_reply is None:
        return
    try:
        request.check_reply(text)
    except ReplyFormatError as exc:
        raise RetryableBackendError(
            "unusable reply", kind="bad_reply", member=member, cause=short_cause(exc)
        ) from exc


def _usable(request: CompletionRequest, text: str) -> bool:
    """A cached reply still passes the request's check (a cache may predate the check)."""
    try:
        _check_reply(request, text, "")
    except RetryableBackendError:
        return False
    return True


def _with_member(error: BackendError, member: str) -> BackendError:
    """A copy of ``error`` that names the member (members may leave it blank)."""
    kwargs: dict[str, Any] = {
        "member": member,
        "status": error.status,
        "cause": error.cause,
        "retry_after": error.retry_after,
    }
    message = str(error.args[0]) if error.args else type(error).__name__
    message = message.split(" member=")[0].split(" status=")[0]
    if isinstance(error, BackendTimeoutError):
        return BackendTimeoutError(message, **kwargs)
    if isinstance(error, RetryableBackendError):
        return RetryableBackendError(message, kind=error.kind, **kwargs)
    return type(error)(message, **kwargs)
