"""Epoch-level longitudinal comparison: the same sampled items under the previous epoch's
skill and the current one, sorted into improved / regressed / persistent-fail / stable pairs.

Pure functions; the trainer makes the rollouts and the optimizer call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from skillopt.trainer.config import PairPolicy
from skillopt.trainer.envs.base import RolloutResult

__all__ = ["ComparisonPair", "PairCategory", "build_pairs", "filter_pairs", "format_comparison"]


class PairCategory(StrEnum):
    IMPROVED = "improved"
    REGRESSED = "regressed"
    PERSISTENT_FAIL = "persistent_fail"
    STABLE_SUCCESS = "stable_success"


@dataclass(frozen=True, slots=True, kw_only=True)
class ComparisonPair:
    item_id: str
    category: PairCategory
    prev: RolloutResult
    curr: RolloutResult

    def to_json(self) -> dict[str, Any]:
        def side(r: RolloutResult) -> dict[str, Any]:
            return {
                "hard": r.hard,
                "soft": r.soft,
                "prediction": r.response,
                "fail_reason": r.reason,
            }

        return {
            "id": self.item_id,
            "category": self.category.value,
            "prev": side(self.prev),
            "curr": side(self.curr),
        }


def _category(prev_ok: bool, curr_ok: bool) -> PairCategory:
    if prev_ok and curr_ok:
        return PairCategory.STABLE_SUCCESS
    if prev_ok:
        return PairCategory.REGRESSED
    if curr_ok:
        return PairCategory.IMPROVED
    return PairCategory.PERSISTENT_FAIL


def build_pairs(
    prev: Sequence[RolloutResult], curr: Sequence[RolloutResult]
) -> list[ComparisonPair]:
    """Pairs by item id, in the order of ``curr``."""
    by_id = {r.task_id: r for r in prev}
    return [
        ComparisonPair(
            item_id=c.task_id,
            category=_category(by_id[c.task_id].passed, c.passed),
            prev=by_id[c.task_id],
            curr=c,
        )
        for c in curr
        if c.task_id in by_id
    ]


_POLICY = {
    PairPolicy.MIXED: set(PairCategory),
    PairPolicy.CHANGED: {PairCategory.IMPROVED, PairCategory.REGRESSED},
    PairPolicy.UNCHANGED: {PairCategory.PERSISTENT_FAIL, PairCategory.STABLE_SUCCESS},
}


def filter_pairs(pairs: Sequence[ComparisonPair], policy: PairPolicy) -> list[ComparisonPair]:
    keep = _POLICY[policy]
    return [p for p in pairs if p.category in keep]


_ORDER = (
    PairCategory.REGRESSED,
    PairCategory.PERSISTENT_FAIL,
    PairCategory.IMPROVED,
    PairCategory.STABLE_SUCCESS,
)


def format_comparison(pairs: Sequence[ComparisonPair], *, max_chars: int = 1200) -> str:
    """Counts, then regressions first; stable successes are listed without trajectories."""
    counts = {c: sum(1 for p in pairs if p.category is c) for c in _ORDER}
    lines = ["Counts: " + ", ".join(f"{c.value}={n}" for c, n in counts.items())]
    for category in _ORDER:
        chosen = [p for p in pairs if p.category is category]
        if not chosen:
            continue
        lines.append(f"\n## {category.value.replace('_', ' ').title()}")
        for p in chosen:
            if category is PairCategory.STABLE_SUCCESS:
                lines.append(f"- {p.item_id}")
                continue
            lines.append(f"### {p.item_id}")
            lines.append("Previous skill attempt:\n" + p.prev.trajectory[:max_chars])
            lines.append("Current skill attempt:\n" + p.curr.trajectory[:max_chars])
    return "\n".join(lines)
