"""The night's spend cap: model calls and tokens, checked before every call.

:class:`SpendingPool` wraps the backend pool. A call is refused with
:class:`BudgetExceededError` once the cap is reached; calls already in flight finish and
are counted, so the overshoot is bounded by the pool's concurrency. Cached replies cost
nothing and are not counted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from skillopt.backends.base import Completion, CompletionRequest, Role
from skillopt.backends.base import Pool as ModelPool
from skillopt.errors import BudgetExceededError

__all__ = ["ModelPool", "SpendEstimate", "SpendingPool"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendEstimate:
    calls: int
    tokens: int
    by_stage: dict[str, int]

    def describe(self) -> str:
        stages = ", ".join(f"{k} {v}" for k, v in self.by_stage.items() if v)
        return f"about {self.calls} model calls (~{self.tokens} tokens): {stages}"


class SpendingPool:
    """A pool wrapper enforcing ``max_calls`` / ``max_tokens`` (0 = unlimited)."""

    def __init__(self, pool: ModelPool, *, max_calls: int = 0, max_tokens: int = 0) -> None:
        self.pool = pool
        self.max_calls = max_calls
        self.max_tokens = max_tokens
        self.calls = 0
        self.tokens = 0
        self.failures = 0
        self.calls_by_stage: Counter[str] = Counter()
        self.errors_by_class: Counter[str] = Counter()
        self.reached: str = ""  # "calls" or "tokens" once the cap stopped a call

    @property
    def exhausted(self) -> bool:
        return bool(self.reached)

    def _check(self) -> None:
        if self.max_calls and self.calls >= self.max_calls:
            self.reached = self.reached or "calls"
        elif self.max_tokens and self.tokens >= self.max_tokens:
            self.reached = self.reached or "tokens"
        else:
            return
        raise BudgetExceededError(
            f"night budget reached ({self.reached}: {self.calls} calls, {self.tokens} tokens)"
        )

    async def complete(self, request: CompletionRequest) -> Completion:
        self._check()
        self.calls += 1
        self.calls_by_stage[request.stage] += 1
        try:
            done = await self.pool.complete(request)
        except Exception as exc:
            self.failures += 1
            self.errors_by_class[_error_class(exc)] += 1
            raise
        if done.cached:
            self.calls -= 1
            self.calls_by_stage[request.stage] -= 1
        else:
            self.tokens += done.usage.total_tokens
        return done

    def accounting(self) -> dict[str, Any]:
        return self.pool.accounting()

    def total_concurrency(self, role: Role) -> int:
        return self.pool.total_concurrency(role)

    def summary(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "tokens": self.tokens,
            "failures": self.failures,
            "max_calls": self.max_calls,
            "max_tokens": self.max_tokens,
            "budget_reached": self.reached,
            "calls_by_stage": dict(self.calls_by_stage),
            "errors_by_class": dict(self.errors_by_class),
        }


def _error_class(exc: BaseException) -> str:
    label = getattr(exc, "error_class", None)
    return str(label) if label else type(exc).__name__
