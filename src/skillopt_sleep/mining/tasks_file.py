"""The reviewable tasks file written by ``skillopt-sleep harvest --output tasks.json``.

Shape::

    {"version": 1, "reviewed": false, "generated_at": "<UTC ISO>",
     "project": "...", "source": "...", "n_sessions": 12, "tasks": [TaskRecord, ...]}

The file is always written with ``reviewed: false``; the user reads and edits it, then
sets ``reviewed: true``. Loading validates everything before any model is called: every
task, every rule check (an unknown op or a bad argument is an error naming the task and
the check), duplicate ids, and the types of the top-level keys. Refusing an unreviewed
file for a real backend is the caller's decision; :attr:`TasksFile.reviewed` says.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from skillopt.atomicio import atomic_write_json
from skillopt.errors import DataError
from skillopt.judges import validate_checks
from skillopt.redact import redact_obj
from skillopt.types import Origin, ReferenceKind, TaskRecord
from skillopt_sleep.harvest.timeparse import as_utc, parse_instant

__all__ = [
    "MAX_TASKS_FILE_BYTES",
    "MAX_TASK_FIELD_CHARS",
    "TASKS_FILE_VERSION",
    "TasksFile",
    "load_tasks_file",
    "write_tasks_file",
]

TASKS_FILE_VERSION = 1
MAX_TASKS_FILE_BYTES = 64 * 1024 * 1024
MAX_TASK_FIELD_CHARS = 64 * 1024
"""One task's intent, context, reference or system contract: ample for a pasted log or
stack trace (mined intents are clipped to 800), and every one is sent with each attempt."""
_BOUNDED_FIELDS = ("intent", "context", "reference", "system_contract")
_META_KEYS = {"project": str, "source": str, "n_sessions": int, "note": str}
_KNOWN_KEYS = {"version", "reviewed", "generated_at", "tasks", *_META_KEYS}


@dataclass(frozen=True, slots=True, kw_only=True)
class TasksFile:
    path: Path
    reviewed: bool
    generated_at: datetime | None
    tasks: tuple[TaskRecord, ...]
    metadata: dict[str, Any]
    warnings: tuple[str, ...] = ()


def write_tasks_file(
    path: str | os.PathLike[str],
    tasks: Sequence[TaskRecord],
    *,
    generated_at: datetime,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write a draft (``reviewed: false``) tasks file atomically; strings are redacted."""
    meta = dict(metadata or {})
    unknown = sorted(set(meta) - set(_META_KEYS))
    if unknown:
        raise DataError(f"tasks file: unsupported metadata keys {unknown}")
    document: dict[str, Any] = {
        "version": TASKS_FILE_VERSION,
        "reviewed": False,
        "generated_at": as_utc(generated_at).isoformat(),
        **meta,
        "tasks": [t.to_dict() for t in tasks],
    }
    target = Path(path)
    atomic_write_json(target, redact_obj(document))
    return target


def _task_name(index: int, raw: Any) -> str:
    if isinstance(raw, Mapping) and isinstance(raw.get("id"), str):
        return f"task #{index + 1} ({raw['id']!r})"
    return f"task #{index + 1}"


def _load_task(where: str, index: int, raw: Any) -> tuple[TaskRecord, list[str]]:
    name = _task_name(index, raw)
    try:
        task = TaskRecord.from_dict(raw)
    except DataError as exc:
        raise DataError(f"{where}: {name}: {exc}") from exc
    warnings: list[str] = []
    if task.reference_kind is ReferenceKind.RULE and not task.checks:
        raise DataError(f"{where}: {name}: reference_kind 'rule' needs at least one check")
    for j, check in enumerate(task.checks):
        try:
            validate_checks([check])
        except DataError as exc:
            raise DataError(f"{where}: {name}: check #{j + 1} ({check.label()}): {exc}") from exc
    if task.checks:
        warnings.extend(f"{name}: {w}" for w in validate_checks(task.checks))
    if not task.intent.strip():
        raise DataError(f"{where}: {name}: empty intent")
    for key in _BOUNDED_FIELDS:
        size = len(getattr(task, key))
        if size > MAX_TASK_FIELD_CHARS:
            raise DataError(
                f"{where}: {name}: {key} is {size:,} characters, more than the "
                f"{MAX_TASK_FIELD_CHARS:,} a task may carry (it is sent with every attempt); "
                "shorten it"
            )
    return task, warnings


def _read_json(target: Path) -> Any:
    where = str(target)
    try:
        with open(target, "rb") as handle:
            raw = handle.read(MAX_TASKS_FILE_BYTES + 1)
        if len(raw) > MAX_TASKS_FILE_BYTES:
            raise DataError(
                f"{where}: a tasks file larger than {MAX_TASKS_FILE_BYTES // (1024 * 1024)} MiB "
                "is not read; split it or remove what the tasks do not need"
            )
        return json.loads(raw.decode("utf-8"))
    except FileNotFoundError as exc:
        raise DataError(f"{where}: no such tasks file") from exc
    except IsADirectoryError as exc:
        raise DataError(f"{where}: is a directory, not a tasks file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{where}: cannot read tasks file ({exc})") from exc
    except json.JSONDecodeError as exc:
        raise DataError(f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno})") from exc
    except RecursionError as exc:
        raise DataError(f"{where}: JSON nested too deeply to be a tasks file") from exc


def load_tasks_file(path: str | os.PathLike[str]) -> TasksFile:
    """Read and validate a tasks file; every problem raises :class:`DataError` naming it."""
    target = Path(path)
    where = str(target)
    data = _read_json(target)

    if isinstance(data, list):  # a bare list of tasks is a draft
        data = {"version": TASKS_FILE_VERSION, "reviewed": False, "tasks": data}
    if not isinstance(data, dict):
        raise DataError(f"{where}: expected a JSON object with a 'tasks' list")
    unknown = sorted(set(data) - _KNOWN_KEYS)
    if unknown:
        raise DataError(f"{where}: unknown keys {unknown} (known: {sorted(_KNOWN_KEYS)})")
    if data.get("version") != TASKS_FILE_VERSION:
        raise DataError(f"{where}: unsupported version {data.get('version')!r} (expected 1)")
    reviewed = data.get("reviewed", False)
    if not isinstance(reviewed, bool):
        raise DataError(f"{where}: 'reviewed' must be true or false, got {reviewed!r}")
    generated_at = None
    if data.get("generated_at") is not None:
        generated_at = parse_instant(data["generated_at"])
        if generated_at is None:
            raise DataError(f"{where}: 'generated_at' is not a timestamp")
    metadata: dict[str, Any] = {}
    for key, kind in _META_KEYS.items():
        if key in data:
            if not isinstance(data[key], kind) or isinstance(data[key], bool):
                raise DataError(f"{where}: {key!r} must be a {kind.__name__}")
            metadata[key] = data[key]
    raw_tasks = data.get("tasks")
    if not isinstance(raw_tasks, list):
        raise DataError(f"{where}: 'tasks' must be a list")

    tasks: list[TaskRecord] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_tasks):
        task, task_warnings = _load_task(where, index, raw)
        if reviewed and task.checks and task.origin is Origin.MINED:
            # the user read and kept these checks: theirs now, the whole judge
            task = dataclasses.replace(task, origin=Origin.MANUAL)
        if task.id in seen:
            raise DataError(f"{where}: {_task_name(index, raw)}: duplicate id {task.id!r}")
        seen.add(task.id)
        tasks.append(task)
        warnings.extend(task_warnings)
    return TasksFile(
        path=target,
        reviewed=reviewed,
        generated_at=generated_at,
        tasks=tuple(tasks),
        metadata=metadata,
        warnings=tuple(warnings),
    )
