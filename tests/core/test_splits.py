"""Hash splits: golden table, precedence, top-ups, dream/recall, stability, partition."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skillopt.errors import ConfigError
from skillopt.splits import (
    DEFAULT_VAL_FRACTION,
    assign_splits,
    partition,
    resolve_fractions,
    split_bucket,
)
from skillopt.types import Origin, Split, TaskRecord


def task(task_id: str, origin: Origin = Origin.MINED, split: Split = Split.TRAIN) -> TaskRecord:
    return TaskRecord(id=task_id, intent="do " + task_id, origin=origin, split=split)


TWELVE = [task(f"task-{i}") for i in range(12)]

GOLDEN_SEED_42 = {
    "task-0": "val",
    "task-1": "train",
    "task-2": "train",
    "task-3": "test",
    "task-4": "train",
    "task-5": "val",
    "task-6": "train",
    "task-7": "val",
    "task-8": "val",
    "task-9": "train",
    "task-10": "test",
    "task-11": "val",
}


def test_golden_split_table() -> None:
    out = assign_splits(TWELVE, seed=42, test_fraction=0.2)
    assert {t.id: t.split.value for t in out} == GOLDEN_SEED_42
    assert [t.id for t in out] == [t.id for t in TWELVE]


def test_bucket_is_sha256_of_seed_and_id() -> None:
    expected = int(hashlib.sha256(b"42task-3").hexdigest(), 16) % 100
    assert split_bucket(42, "task-3") == expected == 47


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, (DEFAULT_VAL_FRACTION, 0.0)),
        ({"holdout_fraction": 0.2}, (0.2, 0.0)),
        ({"val_fraction": 0.1, "holdout_fraction": 0.5}, (0.1, 0.0)),
        ({"val_fraction": 0.0, "holdout_fraction": 0.5}, (0.0, 0.0)),
        ({"val_fraction": 0.3, "test_fraction": 0.2}, (0.3, 0.2)),
    ],
)
def test_fraction_precedence(kwargs: dict[str, float], expected: tuple[float, float]) -> None:
    assert resolve_fractions(**kwargs) == expected


@pytest.mark.parametrize(
    "kwargs",
    [
        {"val_fraction": 0.5, "test_fraction": 0.5},
        {"val_fraction": 1.0},
        {"val_fraction": -0.1},
        {"holdout_fraction": 1.5},
        {"test_fraction": float("nan")},
    ],
)
def test_bad_fractions_raise(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        assign_splits(TWELVE, **kwargs)


def test_dream_and_recall_always_train() -> None:
    tasks = [task(f"d{i}", Origin.DREAM, Split.VAL) for i in range(20)]
    tasks += [task(f"r{i}", Origin.RECALL, Split.TEST) for i in range(20)]
    out = assign_splits(tasks, val_fraction=0.9, test_fraction=0.05)
    assert {t.split for t in out} == {Split.TRAIN}


def test_val_top_up_promotes_lowest_hash_train_task() -> None:
    ids = ["task-1", "task-2", "task-4"]  # all land in train at seed 42, val 0.05
    out = assign_splits([task(i) for i in ids], seed=42, val_fraction=0.05)
    lowest = min(ids, key=lambda i: int(hashlib.sha256(f"42{i}".encode()).hexdigest(), 16))
    assert [t.id for t in out if t.split is Split.VAL] == [lowest]


def test_train_top_up_promotes_lowest_hash_val_task() -> None:
    ids = ["task-0", "task-5", "task-7"]  # buckets 10, 17, 27: all val at 0.9
    out = assign_splits([task(i) for i in ids], seed=42, val_fraction=0.9)
    lowest = min(ids, key=lambda i: int(hashlib.sha256(f"42{i}".encode()).hexdigest(), 16))
    assert [t.id for t in out if t.split is Split.TRAIN] == [lowest]


def test_test_tasks_are_never_moved_by_top_ups() -> None:
    # bucket 47 and 36 are test under val .3 test .2 -> cut 30..50
    out = assign_splits(
        [task("task-3"), task("task-10")], seed=42, val_fraction=0.3, test_fraction=0.2
    )
    assert [t.split for t in out] == [Split.TEST, Split.TEST]


def test_no_top_up_for_a_single_task_or_zero_val() -> None:
    assert assign_splits([task("task-1")], val_fraction=0.05)[0].split is Split.TRAIN
    out = assign_splits(TWELVE, val_fraction=0.0)
    assert {t.split for t in out} == {Split.TRAIN}


def test_appending_many_tasks_moves_none() -> None:
    base = [task(f"id-{i}") for i in range(200)]
    more = base + [task(f"new-{i}") for i in range(50)]
    before = assign_splits(base, seed=7, val_fraction=0.3, test_fraction=0.1)
    after = assign_splits(more, seed=7, val_fraction=0.3, test_fraction=0.1)
    assert [t.split for t in after[:200]] == [t.split for t in before]


def test_partition_and_leaks() -> None:
    view = partition(assign_splits(TWELVE, seed=42, test_fraction=0.2))
    assert not view.leaked
    assert {t.id for t in view.test} == {"task-3", "task-10"}
    assert not ({t.id for t in view.train} & {t.id for t in view.val})
    only_train = partition([task("a"), task("b")])
    assert only_train.leaked and only_train.val == only_train.train
    only_val = partition([task("a", split=Split.VAL)])
    assert only_val.leaked and only_val.train == only_val.val
    overlap = partition([task("a"), task("a", split=Split.VAL)])
    assert overlap.leaked
    only_test = partition([task("a", split=Split.TEST)])
    assert only_test.train == () and only_test.val == () and not only_test.leaked


_ids = st.lists(st.text(alphabet="abcdef0123456789-", min_size=1, max_size=8), unique=True)


@settings(max_examples=200, deadline=None)
@given(
    first=_ids,
    extra=_ids,
    seed=st.integers(min_value=0, max_value=10_000),
    val=st.sampled_from([0.1, 0.34, 0.5]),
    test=st.sampled_from([0.0, 0.1, 0.2]),
)
def test_stable_under_appending_and_disjoint(
    first: list[str], extra: list[str], seed: int, val: float, test: float
) -> None:
    extra = [e for e in extra if e not in first]
    before = assign_splits(
        [task(i) for i in first], seed=seed, val_fraction=val, test_fraction=test
    )
    after = assign_splits(
        [task(i) for i in first + extra], seed=seed, val_fraction=val, test_fraction=test
    )
    # Every task is in exactly one split.
    assert len(after) == len(first) + len(extra)
    view = partition(after)
    ids = [t.id for t in view.test] + [t.id for t in (*view.train, *view.val) if not view.leaked]
    assert len(ids) == len(set(ids))

    def by_hash(task_id: str) -> Split:
        b = split_bucket(seed, task_id)
        cut = round(val * 100)
        return Split.VAL if b < cut else Split.TEST if b < cut + round(test * 100) else Split.TRAIN

    if all(t.split is by_hash(t.id) for t in before + after):
        # No top-up was needed: appending tasks never moves an existing one.
        assert [t.split for t in after[: len(first)]] == [t.split for t in before]
    # Test assignment is purely by hash, top-ups or not.
    for t in after:
        assert (t.split is Split.TEST) == (by_hash(t.id) is Split.TEST)
