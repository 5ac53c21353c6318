"""Rank-and-select: valid, deduplicated, in-range indices in order, budget, fallback."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skillopt.optimizer.rank import needs_ranking, select_edits, select_edits_detailed


@pytest.mark.parametrize(
    ("ranked", "n", "budget", "expected", "fallback"),
    [
        ([1, 1, 9, 0], 5, 2, [1, 0], False),
        ([3, 2, 1], 5, 2, [3, 2], False),
        ([4], 5, 3, [4], False),
        (["1", 2.0, True, None, -1, 2], 5, 3, [2], False),
        ([], 5, 2, [0, 1], True),
        (None, 5, 2, [0, 1], True),
        (["x", 7], 5, 3, [0, 1, 2], True),
        ([1, 2], 5, 0, [], False),  # budget 0 selects nothing
        ([], 2, 5, [0, 1], True),
        ([0], 0, 3, [], False),
    ],
)
def test_select(
    ranked: list[object] | None, n: int, budget: int, expected: list[int], fallback: bool
) -> None:
    assert select_edits(ranked, n, budget) == expected
    detail = select_edits_detailed(ranked, n, budget)
    assert detail.fallback is fallback
    assert detail.note.startswith("fallback" if fallback else "ranked")


@pytest.mark.parametrize(
    ("n", "budget", "needed"), [(3, 3, False), (4, 3, True), (1, 0, True), (0, 0, False)]
)
def test_needs_ranking(n: int, budget: int, needed: bool) -> None:
    assert needs_ranking(n, budget) is needed


@given(
    ranked=st.lists(st.one_of(st.integers(-3, 12), st.text(max_size=2), st.booleans())),
    n=st.integers(0, 10),
    budget=st.integers(0, 6),
)
def test_selection_properties(ranked: list[object], n: int, budget: int) -> None:
    got = select_edits(ranked, n, budget)
    assert len(got) <= min(budget, n)
    assert len(got) == len(set(got))
    assert all(0 <= i < n for i in got)
    valid = [r for r in ranked if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < n]
    if valid and budget > 0:
        # In the model's order: a prefix of the de-duplicated valid indices.
        dedup = list(dict.fromkeys(valid))
        assert got == dedup[: len(got)]
        assert len(got) == min(budget, len(dedup))
