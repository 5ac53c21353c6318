"""Tonight's mined tasks against the archive's request keys: one request, one task.

A night mines with one miner, the archive may hold the other's tasks for the same requests
(``night.llm_mine`` switched between nights, or an LLM night's sessions that fell back to
the heuristic miner). :func:`alias_mined`, before the night composes its set:

1. maps each heuristic task whose request key an LLM task owns (tonight's first, else the
   archive's) to that LLM task: the canonical record, with the heuristic task's sessions;
2. names the archived heuristic tasks tonight's LLM tasks make duplicates, so the night
   recalls none of them (committing tonight retires them, see
   :mod:`skillopt_sleep.tasks.archive_aliases`).

Ids stay as each miner makes them; nothing here calls a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from skillopt.types import TaskRecord
from skillopt_sleep.mining.heuristic import merge_tasks
from skillopt_sleep.tasks.archive import TaskArchive
from skillopt_sleep.tasks.archive_aliases import miner_of

__all__ = ["Aliased", "alias_mined"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Aliased:
    """Tonight's tasks after aliasing; ``mapped`` says which heuristic task became which
    LLM task, ``duplicates`` the archived heuristic tasks not to recall tonight."""

    tasks: tuple[TaskRecord, ...]
    seen_at: dict[str, datetime]
    request_keys: dict[str, tuple[str, ...]]
    mapped: dict[str, str] = field(default_factory=dict)
    duplicates: frozenset[str] = frozenset()


def alias_mined(
    tasks: Sequence[TaskRecord],
    *,
    seen_at: Mapping[str, datetime],
    request_keys: Mapping[str, Sequence[str]],
    archive: TaskArchive,
) -> Aliased:
    """See the module docstring (reads the archive, records nothing)."""
    owners = archive.request_key_owners({k for keys in request_keys.values() for k in keys})
    tonight_llm: dict[str, TaskRecord] = {}
    for task in tasks:
        if miner_of(task.id) == "llm":
            for key in request_keys.get(task.id, ()):
                tonight_llm.setdefault(key, task)
    out: list[TaskRecord] = []
    mapped: dict[str, str] = {}
    for task in tasks:
        canonical = None
        if miner_of(task.id) == "heuristic":
            canonical = _canonical(request_keys.get(task.id, ()), tonight_llm, owners, archive)
        if canonical is None:
            out.append(task)
            continue
        mapped[task.id] = canonical.id
        out.append(replace(canonical, source_sessions=task.source_sessions, origin=task.origin))
    tonight = {t.id for t in tasks}
    duplicates = frozenset(
        owner
        for task in tasks
        if miner_of(task.id) == "llm"
        for key in request_keys.get(task.id, ())
        for owner in owners.get(key, ())
        if miner_of(owner) == "heuristic" and owner not in tonight
    ) | frozenset(mapped)
    if not mapped:
        return Aliased(tasks=tuple(tasks), seen_at=dict(seen_at),
                       request_keys={k: tuple(v) for k, v in request_keys.items()},
                       duplicates=duplicates)  # fmt: skip
    return Aliased(
        tasks=tuple(merge_tasks(out)),
        seen_at=_renamed_max(seen_at, mapped),
        request_keys=_renamed_union(request_keys, mapped),
        mapped=mapped,
        duplicates=duplicates,
    )


def _canonical(
    keys: Sequence[str],
    tonight_llm: Mapping[str, TaskRecord],
    owners: Mapping[str, frozenset[str]],
    archive: TaskArchive,
) -> TaskRecord | None:
    """The LLM task owning one of ``keys``: tonight's, else the archive's (smallest id)."""
    for key in keys:
        if key in tonight_llm:
            return tonight_llm[key]
    for task_id in sorted({o for k in keys for o in owners.get(k, ()) if miner_of(o) == "llm"}):
        item = archive.task(task_id)
        if item is not None:
            return item.task
    return None


def _renamed_max(seen_at: Mapping[str, datetime], mapped: Mapping[str, str]) -> dict[str, datetime]:
    out: dict[str, datetime] = {}
    for task_id, when in seen_at.items():
        name = mapped.get(task_id, task_id)
        out[name] = max(out.get(name, when), when)
    return out


def _renamed_union(
    request_keys: Mapping[str, Sequence[str]], mapped: Mapping[str, str]
) -> dict[str, tuple[str, ...]]:
    out: dict[str, dict[str, None]] = {}
    for task_id, keys in request_keys.items():
        out.setdefault(mapped.get(task_id, task_id), {}).update(dict.fromkeys(keys))
    return {task_id: tuple(keys) for task_id, keys in out.items()}
