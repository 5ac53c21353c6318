"""The night's spend estimate, printed before any call.

The cap itself is :class:`skillopt.backends.wrappers.BudgetCompleter`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SpendEstimate"]

# The order a night spends in, so the line reads the same on every run.
_NIGHT_ORDER = ("mine", "rollout", "judge", "reflect", "trial", "union", "final", "steady", "test")


def _in_night_order(stage: str) -> tuple[int, str]:
    known = stage in _NIGHT_ORDER
    return (_NIGHT_ORDER.index(stage) if known else len(_NIGHT_ORDER), stage)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendEstimate:
    calls: int
    tokens: int
    by_stage: dict[str, int]
    by_skill: dict[str, int] = field(default_factory=dict)  # the fan-out's share, per skill

    def describe(self) -> str:
        stages = ", ".join(
            f"{k} {self.by_stage[k]}" for k in sorted(self.by_stage, key=_in_night_order)
            if self.by_stage[k]
        )  # fmt: skip
        said = f"about {self.calls} model calls (~{self.tokens} tokens): {stages}"
        if self.by_skill:
            said += "; of which your skills: " + ", ".join(
                f"{name} {n}" for name, n in self.by_skill.items()
            )
        return said
