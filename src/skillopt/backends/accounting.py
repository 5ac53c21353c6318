"""Call accounting per member, role and stage: calls, retries, failures, tokens, latency.

``calls`` are model calls that answered; ``attempts`` every request sent (retries included);
the tokens are those of every reply, an unusable one the pool retried included. A reply the
response cache served is no call and is counted apart (``cache_hits``). ``cached_tokens``
is the part of ``prompt_tokens`` the provider served from its own prompt cache, where it
reports one.

Everything here runs on the event loop thread, so plain counters need no locks. Latencies
are kept in a bounded reservoir so a night of a million calls stays small in memory.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from skillopt.backends.base import Usage

__all__ = ["Accounting"]

_RESERVOIR = 20_000


@dataclass(kw_only=True)
class _Bucket:
    calls: int = 0  # finished calls that succeeded (one per complete(), not per attempt)
    attempts: int = 0
    retries: int = 0
    cache_hits: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # part of prompt_tokens the provider served from its prompt cache
    estimated_tokens: int = 0  # part of the totals that was estimated, not reported
    latencies: list[float] = field(default_factory=list)
    seen_latencies: int = 0

    def add_tokens(self, usage: Usage) -> None:
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        self.cached_tokens += usage.cached_tokens
        if usage.estimated:
            self.estimated_tokens += usage.total_tokens

    def add_latency(self, seconds: float, rng: random.Random) -> None:
        self.seen_latencies += 1
        if len(self.latencies) < _RESERVOIR:
            self.latencies.append(seconds)
            return
        slot = rng.randrange(self.seen_latencies)
        if slot < _RESERVOIR:
            self.latencies[slot] = seconds

    def as_dict(self) -> dict[str, Any]:
        ordered = sorted(self.latencies)
        return {
            "calls": self.calls,
            "attempts": self.attempts,
            "retries": self.retries,
            "cache_hits": self.cache_hits,
            "failures": dict(sorted(self.failures.items())),
            "failed": sum(self.failures.values()),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "estimated_tokens": self.estimated_tokens,
            "tokens_estimated": self.estimated_tokens > 0,
            "latency_p50": _percentile(ordered, 0.50),
            "latency_p95": _percentile(ordered, 0.95),
            "latency_max": round(ordered[-1], 6) if ordered else None,
        }


def _percentile(ordered: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an already sorted list."""
    if not ordered:
        return None
    rank = max(1, min(len(ordered), math.ceil(q * len(ordered))))
    return round(ordered[rank - 1], 6)


class Accounting:
    """Counters keyed three ways. Each event updates the member, role and stage buckets."""

    def __init__(self, *, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self._by: dict[str, dict[str, _Bucket]] = {"member": {}, "role": {}, "stage": {}}
        self._total = _Bucket()

    def _buckets(self, member: str | None, role: str, stage: str) -> list[_Bucket]:
        keys = (("member", member), ("role", role), ("stage", stage))
        out = [self._total]
        for axis, key in keys:
            if key is None:
                continue
            table = self._by[axis]
            bucket = table.get(key)
            if bucket is None:
                bucket = table[key] = _Bucket()
            out.append(bucket)
        return out

    def attempt(self, *, member: str, role: str, stage: str) -> None:
        for b in self._buckets(member, role, stage):
            b.attempts += 1

    def retry(self, *, member: str, role: str, stage: str) -> None:
        for b in self._buckets(member, role, stage):
            b.retries += 1

    def failure(
        self,
        *,
        member: str | None,
        role: str,
        stage: str,
        error_class: str,
        usage: Usage | None = None,
    ) -> None:
        """A failed attempt; ``usage`` when a reply came (unusable, still paid for)."""
        for b in self._buckets(member, role, stage):
            b.failures[error_class] += 1
            if usage is not None:
                b.add_tokens(usage)

    def cache_hit(self, *, role: str, stage: str) -> None:
        for b in self._buckets(None, role, stage):
            b.cache_hits += 1

    def success(self, *, member: str, role: str, stage: str, usage: Usage, latency: float) -> None:
        for b in self._buckets(member, role, stage):
            b.calls += 1
            b.add_tokens(usage)
            b.add_latency(latency, self._rng)

    def snapshot(self) -> dict[str, Any]:
        """A plain JSON-able dict: totals plus per member / role / stage."""
        return {
            "total": self._total.as_dict(),
            **{
                f"by_{axis}": {k: b.as_dict() for k, b in sorted(table.items())}
                for axis, table in self._by.items()
            },
        }
