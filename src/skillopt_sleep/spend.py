"""The night's spend estimate, printed before any call.

The cap itself is :class:`skillopt.backends.wrappers.BudgetCompleter`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SpendEstimate"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendEstimate:
    calls: int
    tokens: int
    by_stage: dict[str, int]

    def describe(self) -> str:
        stages = ", ".join(f"{k} {v}" for k, v in self.by_stage.items() if v)
        return f"about {self.calls} model calls (~{self.tokens} tokens): {stages}"
