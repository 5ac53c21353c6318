"""Cross-fitting folds: the night's learnable tasks dealt so that every task is held-out
evidence for exactly one fold's edits.

:func:`assign_folds` deals the tasks into ``n_folds`` folds of near-equal size, ordered by
``sha256(seed, rotation, id)``. An edit proposed from the rollouts of the other folds is
validated on its own fold. ``rotation`` (the night number, and the round within it)
reshuffles the folds from night to night, so two tasks that need the same rule do not stay
in one fold for ever.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from skillopt.errors import ConfigError
from skillopt.types import TaskRecord

__all__ = ["assign_folds", "make_folds"]


def assign_folds(
    task_ids: Sequence[str], *, n_folds: int, seed: int | str = 42, rotation: int = 0
) -> dict[str, int]:
    """``{task_id: fold}`` with folds ``0..k-1``, ``k = min(n_folds, distinct ids)``.

    Tasks are ordered by hash and dealt round-robin, so fold sizes differ by at most one
    and the assignment depends only on ``(seed, rotation, id)`` and the set of ids.
    """
    if isinstance(n_folds, bool) or n_folds < 1:
        raise ConfigError(f"must be >= 1, got {n_folds!r}", key="night.folds")
    ids = list(dict.fromkeys(task_ids))
    k = min(n_folds, len(ids))
    ordered = sorted(ids, key=lambda tid: _order(f"{seed}:{rotation}:{tid}"))
    return {tid: i % k for i, tid in enumerate(ordered)}


def _order(key: str) -> int:
    return int(hashlib.sha256(key.encode()).hexdigest(), 16)


def make_folds(
    tasks: Sequence[TaskRecord], *, n_folds: int, seed: int, rotation: int
) -> list[list[TaskRecord]]:
    """Tasks grouped into cross-fitting folds (at most one fold per task)."""
    assigned = assign_folds([t.id for t in tasks], n_folds=n_folds, seed=seed, rotation=rotation)
    folds: list[list[TaskRecord]] = [[] for _ in range(max(assigned.values(), default=-1) + 1)]
    for task in tasks:
        folds[assigned[task.id]].append(task)
    return folds
