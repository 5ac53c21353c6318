"""The night's spend: the estimate printed before any call, and the cap's names.

The cap itself is :class:`skillopt.backends.wrappers.BudgetCompleter` (``SpendingPool`` here);
``ModelPool`` is :class:`skillopt.backends.base.Pool`. Both names stay for the night modules
that use them.
"""

from __future__ import annotations

from dataclasses import dataclass

from skillopt.backends.base import Pool as ModelPool
from skillopt.backends.wrappers import BudgetCompleter as SpendingPool

__all__ = ["ModelPool", "SpendEstimate", "SpendingPool"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendEstimate:
    calls: int
    tokens: int
    by_stage: dict[str, int]

    def describe(self) -> str:
        stages = ", ".join(f"{k} {v}" for k, v in self.by_stage.items() if v)
        return f"about {self.calls} model calls (~{self.tokens} tokens): {stages}"
