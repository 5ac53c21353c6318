"""``<state_dir>/daemon-state.json``: what the daemon remembers between runs for catch-up.

Per project: when it was first scheduled, the last fire, and the last night's start, end and
outcome. Written atomically after every change; a corrupt file is moved aside (loudly) at
start so the daemon still runs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from skillopt.atomicio import atomic_write_json
from skillopt.errors import CorruptStateError
from skillopt.logging import get_logger

__all__ = ["STATE_FILE", "STATE_VERSION", "DaemonState", "ProjectRecord", "read_daemon_state"]

_log = get_logger(__name__)

STATE_FILE = "daemon-state.json"
STATE_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class ProjectRecord:
    path: str
    first_seen: str
    last_fire: str | None = None
    last_night_started: str | None = None
    last_night_finished: str | None = None
    last_outcome: str | None = None


@dataclass(kw_only=True)
class DaemonState:
    """``<state_dir>/daemon-state.json``: what catch-up needs to survive restarts."""

    path: Path
    projects: dict[str, ProjectRecord] = field(default_factory=dict)

    @classmethod
    def load(cls, state_dir: Path) -> DaemonState:
        path = Path(state_dir) / STATE_FILE
        if not path.exists():
            return cls(path=path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("version") != STATE_VERSION:
                raise ValueError(f"unknown version {data.get('version')!r}")
            projects = {k: ProjectRecord(**v) for k, v in data["projects"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptStateError(str(path), f"cannot read daemon state: {exc}") from exc
        return cls(path=path, projects=projects)

    @classmethod
    def load_or_reset(cls, state_dir: Path) -> DaemonState:
        """Like :meth:`load`, but a corrupt file is moved aside (loudly) so the daemon runs."""
        try:
            return cls.load(state_dir)
        except CorruptStateError as exc:
            path = Path(state_dir) / STATE_FILE
            aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
            path.replace(aside)
            _log.error("daemon.state_corrupt", error=str(exc), moved_to=str(aside))
            return cls(path=path)

    def save(self) -> None:
        atomic_write_json(
            self.path,
            {
                "version": STATE_VERSION,
                "projects": {k: vars(v) for k, v in sorted(self.projects.items())},
            },
        )

    def update(self, key: str, **changes: str | None) -> None:
        self.projects[key] = replace(self.projects[key], **changes)  # type: ignore[arg-type]
        self.save()


def read_daemon_state(state_dir: Path) -> dict[str, ProjectRecord]:
    """Per-project last fire / night / outcome as the daemon recorded them."""
    return DaemonState.load(state_dir).projects
