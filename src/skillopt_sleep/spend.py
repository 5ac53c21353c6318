"""The night's spend estimate, printed before any call.

The cap itself is :class:`skillopt.backends.wrappers.BudgetCompleter`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SpendEstimate"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendEstimate:
    calls: int
    tokens: int
    by_stage: dict[str, int]
    by_skill: dict[str, int] = field(default_factory=dict)  # the fan-out's share, per skill

    def describe(self) -> str:
        stages = ", ".join(f"{k} {v}" for k, v in self.by_stage.items() if v)
        said = f"about {self.calls} model calls (~{self.tokens} tokens): {stages}"
        if self.by_skill:
            said += "; of which your skills: " + ", ".join(
                f"{name} {n}" for name, n in self.by_skill.items()
            )
        return said
