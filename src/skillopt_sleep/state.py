"""Per-project state: harvest cursor, night counter, bounded night history, task archive.

Lives at ``<state_dir>/projects/<project_key>/state.json``. Every save is atomic; a file
that exists but cannot be parsed or validated raises :class:`CorruptStateError` naming the
file. It is never silently reset: the user decides (move it aside, or fix it).

:class:`ProjectState` is frozen; the ``with_*`` / ``begin_night`` / ``record_night``
methods return updated copies, and :class:`StateStore.save` persists one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from skillopt.atomicio import atomic_write_json
from skillopt.errors import CorruptStateError
from skillopt.redact import redact_obj
from skillopt.types import Split, TaskRecord
from skillopt_sleep.night_end import NightResult, RunStatus

__all__ = [
    "ARCHIVE_CAP",
    "HISTORY_CAP",
    "NightEntry",
    "ProjectState",
    "StateStore",
    "UtcInstant",
    "project_dir",
    "project_key",
    "read_state_file",
    "runs_dir",
]

HISTORY_CAP = 200
ARCHIVE_CAP = 300

_SLUG = re.compile(r"[^a-z0-9]+")


def project_key(project_path: str | os.PathLike[str]) -> str:
    """A readable, collision-safe directory name: ``<slug>-<sha256(realpath)[:10]>``."""
    real = os.path.realpath(os.path.expanduser(project_path))
    slug = _SLUG.sub("-", Path(real).name.lower()).strip("-")[:40] or "root"
    digest = hashlib.sha256(real.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{slug}-{digest}"


def project_dir(state_dir: str | os.PathLike[str], project_path: str | os.PathLike[str]) -> Path:
    """``<state_dir>/projects/<key>``: where a project's state, runs and skills live."""
    return Path(state_dir) / "projects" / project_key(project_path)


def runs_dir(state_dir: str | os.PathLike[str], project_path: str | os.PathLike[str]) -> Path:
    """``<project_dir>/runs``: one directory per night."""
    return project_dir(state_dir, project_path) / "runs"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


UtcInstant = Annotated[AwareDatetime, AfterValidator(lambda d: d.astimezone(UTC))]


class NightEntry(_Frozen):
    """One line of the project's night history."""

    night: int = Field(ge=1)
    run_id: str
    started_at: UtcInstant
    status: RunStatus | NightResult  # COMPLETE, or NO_TASKS: nothing to learn from
    accepted: bool = False
    baseline: float | None = None
    candidate: float | None = None
    n_tasks: int = Field(default=0, ge=0)
    run_dir: str = ""
    kept_edits: int = Field(default=0, ge=0)
    rejected_edits: int = Field(default=0, ge=0)
    untested_edits: int = Field(default=0, ge=0)


class ProjectState(_Frozen):
    version: Literal[1] = 1
    project: str
    harvest_cursor: UtcInstant | None = None
    night: int = Field(default=0, ge=0)
    history: tuple[NightEntry, ...] = ()
    task_archive: tuple[dict[str, Any], ...] = ()
    last_model_key: str = ""

    def with_cursor(self, cursor: datetime) -> ProjectState:
        """Advance the harvest cursor (an aware instant; naive means UTC)."""
        moment = cursor if cursor.tzinfo is not None else cursor.replace(tzinfo=UTC)
        return self.model_copy(update={"harvest_cursor": moment.astimezone(UTC)})

    def begin_night(self) -> tuple[ProjectState, int]:
        """The next night number for this project, and the state that reserves it."""
        number = self.night + 1
        return self.model_copy(update={"night": number}), number

    def record_night(self, entry: NightEntry) -> ProjectState:
        """Add (or, for a run recorded before, replace) the night's history entry; the
        counter never falls behind a recorded night. Idempotent: a night resumed after it
        was recorded is still recorded once."""
        if any(e.run_id == entry.run_id for e in self.history):
            first = next(i for i, e in enumerate(self.history) if e.run_id == entry.run_id)
            history = tuple(
                entry if i == first else e
                for i, e in enumerate(self.history)
                if i == first or e.run_id != entry.run_id
            )
        else:
            history = (*self.history, entry)[-HISTORY_CAP:]
        return self.model_copy(update={"history": history, "night": max(self.night, entry.night)})

    def with_model_key(self, key: str) -> ProjectState:
        return self.model_copy(update={"last_model_key": key})

    def archive_tasks(self, tasks: Iterable[TaskRecord]) -> ProjectState:
        """Add mined train/val tasks (newest wins by id); test tasks never enter the archive."""
        kept: dict[str, dict[str, Any]] = {str(t["id"]): t for t in self.task_archive}
        for task in tasks:
            if task.split is Split.TEST:
                continue
            kept.pop(task.id, None)
            kept[task.id] = redact_obj(task.to_dict())
        return self.model_copy(update={"task_archive": tuple(kept.values())[-ARCHIVE_CAP:]})

    def archived_tasks(self) -> list[TaskRecord]:
        return [TaskRecord.from_dict(t) for t in self.task_archive]

    def model_key_changed(self, key: str) -> bool:
        return bool(self.last_model_key) and self.last_model_key != key


class StateStore:
    """Loads and saves :class:`ProjectState` files under one state directory."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.state_dir = Path(state_dir)

    def path_for(self, project: str | os.PathLike[str]) -> Path:
        return project_dir(self.state_dir, project) / "state.json"

    def load(self, project: str | os.PathLike[str]) -> ProjectState:
        """The project's state; a fresh one if there is no file yet."""
        path = self.path_for(project)
        real = os.path.realpath(os.path.expanduser(project))
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return ProjectState(project=real)
        except OSError as exc:
            raise CorruptStateError(str(path), f"unreadable: {exc.strerror or exc}") from exc
        state = _parse(path, raw)
        if state.project != real:
            raise CorruptStateError(
                str(path), f"belongs to project {state.project!r}, not {real!r}"
            )
        return state

    def save(self, state: ProjectState) -> Path:
        path = self.path_for(state.project)
        atomic_write_json(path, state.model_dump(mode="json"))
        return path


def read_state_file(path: Path) -> ProjectState | None:
    """The state file at ``path`` (``None`` when there is none), for one-time migrations."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptStateError(str(path), f"unreadable: {exc.strerror or exc}") from exc
    return _parse(path, raw)


def _parse(path: Path, raw: bytes) -> ProjectState:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptStateError(str(path), f"not valid JSON ({exc})") from exc
    if not isinstance(data, Mapping):
        raise CorruptStateError(str(path), "expected a JSON object")
    try:
        state = ProjectState.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise CorruptStateError(str(path), f"{where}: {first['msg']}") from exc
    for i, task in enumerate(state.task_archive):
        if not isinstance(task.get("id"), str):
            raise CorruptStateError(str(path), f"task_archive.{i}: missing task id")
    return state
