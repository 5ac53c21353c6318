"""Rank-and-select: keep the optimizer's chosen edits, within the step's budget.

Public API::

    needs_ranking(n_candidates, budget) -> bool      # False: keep everything, no model call
    select_edits(ranked_indices, n_candidates, budget) -> list[int]
    select_edits_detailed(ranked_indices, n_candidates, budget) -> Selection

``ranked_indices`` is whatever the ranking model returned (untrusted JSON). Kept: ints
(not bools) in ``range(n_candidates)``, first occurrence only, in the given order,
truncated to ``budget``. When nothing valid remains (or ``ranked_indices`` is ``None``,
e.g. the call failed) the fallback is the first ``budget`` candidates. A budget of 0
selects nothing (the reference kept one edit there; that was a bug).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Selection", "needs_ranking", "select_edits", "select_edits_detailed"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Selection:
    indices: tuple[int, ...]
    fallback: bool  # True when the first-k fallback was used
    note: str  # short text for the step record, e.g. "ranked: selected 2/5"


def needs_ranking(n_candidates: int, budget: int) -> bool:
    return n_candidates > max(0, budget)


def select_edits_detailed(
    ranked_indices: Sequence[object] | None, n_candidates: int, budget: int
) -> Selection:
    limit = max(0, min(budget, n_candidates))
    chosen: list[int] = []
    seen: set[int] = set()
    for raw in ranked_indices or ():
        if len(chosen) >= limit:
            break
        if isinstance(raw, bool) or not isinstance(raw, int):
            continue
        if 0 <= raw < n_candidates and raw not in seen:
            seen.add(raw)
            chosen.append(raw)
    if chosen or limit == 0:
        note = f"ranked: selected {len(chosen)}/{n_candidates}"
        return Selection(indices=tuple(chosen), fallback=False, note=note)
    note = f"fallback: first {limit}/{n_candidates} (no valid ranked index)"
    return Selection(indices=tuple(range(limit)), fallback=True, note=note)


def select_edits(
    ranked_indices: Sequence[object] | None, n_candidates: int, budget: int
) -> list[int]:
    return list(select_edits_detailed(ranked_indices, n_candidates, budget).indices)
