"""Edit-budget schedules: formulas, banker's rounding, floors, resume from the counter."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skillopt.errors import ConfigError, CorruptStateError
from skillopt.optimizer.budget import (
    NO_LIMIT,
    BudgetSchedule,
    ScheduleKind,
    edit_budget,
    schedule_state,
    step_from_state,
)


def values(kind: str, hi: int, lo: int, total: int) -> list[int]:
    sched = BudgetSchedule(kind=ScheduleKind(kind), max_edits=hi, min_edits=lo, total_steps=total)
    return [edit_budget(step, sched) for step in range(1, total + 1)]


@pytest.mark.parametrize(
    ("kind", "hi", "lo", "total", "expected"),
    [
        ("cosine", 10, 2, 4, [9, 6, 3, 2]),
        ("linear", 4, 2, 4, [4, 3, 2, 2]),  # 3.5 -> 4 and 2.5 -> 2: half to even
        ("constant", 5, 1, 3, [5, 5, 5]),
        ("linear", 6, 0, 3, [4, 2, 0]),
        ("cosine", 7, 3, 1, [7]),  # total <= 1 -> max
        ("autonomous", 4, 2, 3, [NO_LIMIT] * 3),
    ],
)
def test_schedule_values(kind: str, hi: int, lo: int, total: int, expected: list[int]) -> None:
    assert values(kind, hi, lo, total) == expected


def test_default_cosine_over_forty_steps() -> None:
    got = values("cosine", 4, 2, 40)
    assert (got.count(4), got.count(3), got.count(2)) == (13, 13, 14)
    assert got == sorted(got, reverse=True)


def test_step_zero_and_beyond_total() -> None:
    sched = BudgetSchedule(kind=ScheduleKind.LINEAR, max_edits=8, min_edits=2, total_steps=4)
    assert edit_budget(0, sched) == 8
    assert edit_budget(100, sched) == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "exponential"},
        {"max_edits": -1},
        {"min_edits": 5, "max_edits": 4},
        {"total_steps": -3},
        {"max_edits": True},
    ],
)
def test_bad_schedules_raise(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        BudgetSchedule(**kwargs)  # type: ignore[arg-type]


def test_bad_step_raises() -> None:
    with pytest.raises(ConfigError):
        edit_budget(-1, BudgetSchedule())


def test_resume_from_counter() -> None:
    sched = BudgetSchedule(kind=ScheduleKind.COSINE, max_edits=10, min_edits=2, total_steps=4)
    state = schedule_state(2)
    assert state == {"current_step": 2}
    resumed = step_from_state(state)
    assert [edit_budget(s, sched) for s in range(resumed + 1, 5)] == [3, 2]
    assert step_from_state({}) == 0
    with pytest.raises(CorruptStateError):
        step_from_state({"current_step": "two"})


@given(
    kind=st.sampled_from([ScheduleKind.LINEAR, ScheduleKind.COSINE, ScheduleKind.CONSTANT]),
    lo=st.integers(0, 10),
    span=st.integers(0, 10),
    total=st.integers(0, 60),
)
def test_budget_within_bounds_and_monotone(
    kind: ScheduleKind, lo: int, span: int, total: int
) -> None:
    sched = BudgetSchedule(kind=kind, max_edits=lo + span, min_edits=lo, total_steps=total)
    got = [edit_budget(s, sched) for s in range(0, total + 2)]
    assert all(lo <= v <= lo + span for v in got)
    assert got == sorted(got, reverse=True)
