"""Deterministic hash splits of tasks into train / val / test.

Public API::

    DEFAULT_VAL_FRACTION = 0.34
    resolve_fractions(*, val_fraction=None, holdout_fraction=None, test_fraction=None)
        -> tuple[float, float]                     # (val, test); explicit val beats holdout
    split_bucket(seed, task_id) -> int             # 0..99
    assign_splits(tasks, *, seed=42, val_fraction=None, test_fraction=None,
                  holdout_fraction=None) -> list[TaskRecord]
    partition(tasks) -> SplitView                  # train/val/test + leak flags for the gate

A task's split depends only on ``(seed, id)``: ``sha256(f"{seed}{id}") % 100`` below
``round(val*100)`` is val, below that plus ``round(test*100)`` is test, else train. So a task
keeps its split across nights and when tasks are appended. Dream and recall tasks are always
train. Two top-ups keep a small set usable (with at least two hashable tasks): no val ->
the train task with the lowest hash becomes val; no train -> the val task with the lowest
hash becomes train. Test tasks are never moved.

Cross-fitting folds (the night) are dealt by :mod:`skillopt_sleep.night.learn.folds`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from skillopt.errors import ConfigError
from skillopt.types import Origin, Split, TaskRecord

__all__ = [
    "DEFAULT_VAL_FRACTION",
    "SplitView",
    "assign_splits",
    "partition",
    "resolve_fractions",
    "split_bucket",
]

DEFAULT_VAL_FRACTION = 0.34
_ALWAYS_TRAIN = frozenset({Origin.DREAM, Origin.RECALL})


def _check_fraction(name: str, value: float) -> float:
    if isinstance(value, bool) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ConfigError(f"must be a number in [0, 1], got {value!r}", key=name)
    return float(value)


def resolve_fractions(
    *,
    val_fraction: float | None = None,
    holdout_fraction: float | None = None,
    test_fraction: float | None = None,
) -> tuple[float, float]:
    """(val, test). An explicit ``val_fraction`` (even 0.0) beats the legacy
    ``holdout_fraction``, which beats the default; the sum must stay below 1."""
    if val_fraction is not None:
        val = _check_fraction("val_fraction", val_fraction)
    elif holdout_fraction is not None:
        val = _check_fraction("holdout_fraction", holdout_fraction)
    else:
        val = DEFAULT_VAL_FRACTION
    test = _check_fraction("test_fraction", test_fraction) if test_fraction is not None else 0.0
    if val + test >= 1.0:
        raise ConfigError(
            f"val ({val}) + test ({test}) must be below 1 so that something is left to train on",
            key="val_fraction",
        )
    return val, test


def _hash_key(seed: int | str, task_id: str) -> int:
    return int(hashlib.sha256(f"{seed}{task_id}".encode()).hexdigest(), 16)


def split_bucket(seed: int | str, task_id: str) -> int:
    return _hash_key(seed, task_id) % 100


def assign_splits(
    tasks: Sequence[TaskRecord],
    *,
    seed: int | str = 42,
    val_fraction: float | None = None,
    test_fraction: float | None = None,
    holdout_fraction: float | None = None,
) -> list[TaskRecord]:
    """Return copies of ``tasks`` (same order) with ``split`` set by hash."""
    val, test = resolve_fractions(
        val_fraction=val_fraction, holdout_fraction=holdout_fraction, test_fraction=test_fraction
    )
    val_cut = round(val * 100)
    test_cut = val_cut + round(test * 100)
    out: list[TaskRecord] = []
    hashed: list[int] = []  # indexes of tasks split by hash
    for task in tasks:
        if task.origin in _ALWAYS_TRAIN:
            out.append(replace(task, split=Split.TRAIN))
            continue
        bucket = split_bucket(seed, task.id)
        split = Split.VAL if bucket < val_cut else Split.TEST if bucket < test_cut else Split.TRAIN
        hashed.append(len(out))
        out.append(replace(task, split=split))
    if len(hashed) < 2:
        return out

    def lowest(split: Split) -> int | None:
        pool = [i for i in hashed if out[i].split is split]
        return min(pool, key=lambda i: _hash_key(seed, out[i].id)) if pool else None

    if val_cut > 0 and lowest(Split.VAL) is None and (i := lowest(Split.TRAIN)) is not None:
        out[i] = replace(out[i], split=Split.VAL)
    if lowest(Split.TRAIN) is None and (i := lowest(Split.VAL)) is not None:
        out[i] = replace(out[i], split=Split.TRAIN)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class SplitView:
    """The sets a night works with. ``leaked`` (with reasons) means val cannot be trusted."""

    train: tuple[TaskRecord, ...]
    val: tuple[TaskRecord, ...]
    test: tuple[TaskRecord, ...]
    leak_reasons: tuple[str, ...] = ()

    @property
    def leaked(self) -> bool:
        return bool(self.leak_reasons)


def partition(tasks: Sequence[TaskRecord]) -> SplitView:
    """Group by split. With no val, val falls back to train (and vice versa), flagged as a
    leak so the gate reports ``reject_unverified`` instead of accepting. Test tasks never
    enter train or val."""
    train = tuple(t for t in tasks if t.split is Split.TRAIN)
    val = tuple(t for t in tasks if t.split is Split.VAL)
    test = tuple(t for t in tasks if t.split is Split.TEST)
    reasons: list[str] = []
    if not val and train:
        val = train
        reasons.append("no val tasks: val falls back to train")
    if not train and val:
        train = val
        reasons.append("no train tasks: train falls back to val")
    overlap = {t.id for t in train} & {t.id for t in val}
    if overlap and not reasons:
        reasons.append(f"{len(overlap)} task id(s) in both train and val")
    return SplitView(train=train, val=val, test=test, leak_reasons=tuple(reasons))
