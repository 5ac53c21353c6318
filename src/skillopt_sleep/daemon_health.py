"""What ``status`` shows about the daemon for one project: next wake, who runs, last outcome.

Read-only: it looks at the lock files and the daemon's state file, never at a running
daemon's memory, so it works whether or not a daemon is up.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from skillopt.errors import CorruptStateError
from skillopt_sleep.daemon import next_wake_times
from skillopt_sleep.daemon_settings import DaemonSettings
from skillopt_sleep.daemon_state import read_daemon_state
from skillopt_sleep.lock import (
    LockHolder,
    daemon_lock_path,
    lock_is_held,
    project_key,
    project_lock_path,
)

__all__ = ["daemon_holder", "project_health"]


def daemon_holder(state_dir: Path) -> LockHolder | None:
    """The running daemon for this state dir, if any (for ``status``)."""
    return lock_is_held(daemon_lock_path(state_dir))


def project_health(
    settings: DaemonSettings, state_dir: Path, project: Path, *, now: datetime | None = None
) -> dict[str, Any]:
    """What ``status`` shows about scheduling for one project (JSON-ready).

    ``next_wake`` is computed as if ``project`` were scheduled (its own entry or the
    default time); ``daemon`` is the live daemon's holder record, ``night_in_progress``
    the holder of the project lock (a daemon night, ``once`` or ``dry-run``).
    """
    resolved = Path(project).expanduser().resolve()
    wake = next_wake_times(settings.with_projects([resolved]), now=now).get(resolved)
    holder = daemon_holder(state_dir)
    night = lock_is_held(project_lock_path(state_dir, project_key(resolved)))
    try:
        record = read_daemon_state(state_dir).get(project_key(resolved))
    except CorruptStateError:
        record = None
    return {
        "next_wake": wake.isoformat() if wake else None,
        "daemon_running": holder is not None,
        "daemon": holder.to_dict() if holder else None,
        "night_in_progress": night.to_dict() if night else None,
        "daemon_last_outcome": record.last_outcome if record else None,
        "daemon_last_night_finished": record.last_night_finished if record else None,
    }
