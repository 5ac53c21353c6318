"""Which archived tasks a night brings back, in what order, and when a task retires.

Pure functions over :class:`ArchivedTask`. The recall order, best first:

1. still failing (its latest outcome did not pass, or it was never measured);
2. recurring (mined from two or more sessions);
3. recently seen (whole days since it was last seen, fewer first);
4. related to tonight's tasks (word overlap of the intents, higher first);
5. then most recently seen, then id (a stable order).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from skillopt.types import TaskRecord
from skillopt_sleep.tasks.records import ArchivedTask, ArchivePolicy

__all__ = [
    "PASSED",
    "UNSEEN",
    "recall_order",
    "relatedness",
    "retire_reason",
    "share_capacity",
    "words",
]

_WORD = re.compile(r"[^\W_]{3,}", re.UNICODE)
UNSEEN = "not seen in any session"  # how an unseen retirement's reason starts
PASSED = "passed on "  # how a solved retirement's reason starts


def words(text: str) -> frozenset[str]:
    """Lower-cased words of three letters or more: a cheap bag for relatedness."""
    return frozenset(w.casefold() for w in _WORD.findall(text))


def relatedness(task: TaskRecord, tonight: Sequence[frozenset[str]]) -> float:
    """The best Jaccard overlap between ``task``'s intent and any of tonight's intents."""
    mine = words(task.intent)
    if not mine:
        return 0.0
    best = 0.0
    for other in tonight:
        if other:
            best = max(best, len(mine & other) / len(mine | other))
    return best


def recall_order(
    candidates: Iterable[ArchivedTask], *, now: datetime, related_to: Sequence[TaskRecord] = ()
) -> list[ArchivedTask]:
    """``candidates`` best first (see the module docstring)."""
    tonight = [words(t.intent) for t in related_to]

    def key(item: ArchivedTask) -> tuple[int, int, int, float, float, str]:
        days = max(0, (now - item.last_seen) // timedelta(days=1))
        return (
            0 if item.failing else 1,
            0 if item.recurrences >= 2 else 1,
            days,
            -relatedness(item.task, tonight),
            -item.last_seen.timestamp(),
            item.id,
        )

    return sorted(candidates, key=key)


def retire_reason(item: ArchivedTask, *, now: datetime, policy: ArchivePolicy) -> str:
    """Why ``item`` should retire now, or ``""`` when it stays active."""
    passes = policy.retire_after_passes
    if passes and item.pass_streak >= passes:
        return f"{PASSED}{item.pass_streak} consecutive nights"
    days = policy.retire_after_days
    if days and now - item.last_seen >= timedelta(days=days):
        unseen = (now - item.last_seen) // timedelta(days=1)
        return f"{UNSEEN} for {unseen} days"
    return ""


def share_capacity(
    max_tasks: int, *, available_new: int, available_recalled: int, recall_share: float
) -> tuple[int, int]:
    """How many new and recalled tasks a night takes.

    ``recall_share`` of ``max_tasks`` (rounded) is reserved for recalled tasks and the rest
    for new ones; capacity one kind cannot use goes to the other.
    """
    recall_quota = round(max_tasks * recall_share)
    new_quota = max_tasks - recall_quota
    new = min(available_new, new_quota)
    recalled = min(available_recalled, recall_quota + (new_quota - new))
    new = min(available_new, max_tasks - recalled)
    return new, recalled
