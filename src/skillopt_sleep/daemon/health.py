"""What ``status`` shows about the daemon for one project: next wake, who runs, last outcome.

Read-only: it looks at the lock files and the daemon's state file, never at a running
daemon's memory, so it works whether or not a daemon is up.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skillopt.errors import CorruptStateError
from skillopt_sleep.daemon.settings import DaemonSettings
from skillopt_sleep.daemon.state import read_daemon_state
from skillopt_sleep.lock import (
    LockHolder,
    daemon_lock_path,
    lock_is_held,
    project_key,
    project_lock_path,
)
from skillopt_sleep.scheduled import find_schedulers, next_daily, read_crontab

__all__ = ["daemon_holder", "project_health"]


def daemon_holder(state_dir: Path) -> LockHolder | None:
    """The running daemon for this state dir, if any (for ``status``)."""
    return lock_is_held(daemon_lock_path(state_dir))


def project_health(
    settings: DaemonSettings,
    state_dir: Path,
    project: Path,
    *,
    now: datetime | None = None,
    crontab: Callable[[], str] = read_crontab,
) -> dict[str, Any]:
    """What ``status`` shows about scheduling for one project (JSON-ready).

    ``scheduled_by`` lists what starts nights for the project (see
    :mod:`skillopt_sleep.scheduled`); ``next_wake`` is the earliest of their next fires,
    ``None`` when nothing schedules nights. ``daemon`` is the live daemon's holder record,
    ``night_in_progress`` the holder of the project lock (a daemon night, ``once`` or
    ``dry-run``).
    """
    resolved = Path(project).expanduser().resolve()
    holder = daemon_holder(state_dir)
    night = lock_is_held(project_lock_path(state_dir, project_key(resolved)))
    try:
        record = read_daemon_state(state_dir).get(project_key(resolved))
    except CorruptStateError:
        record = None
    schedulers = find_schedulers(
        settings,
        resolved,
        daemon_pid=holder.pid if holder else None,
        daemon_knows=record is not None,
        crontab=crontab,
    )
    wakes: list[datetime] = []
    if any(s.kind in ("daemon", "systemd-daemon") for s in schedulers):
        from skillopt_sleep.daemon.cron import next_wake_times  # the scheduler, only when used

        wake = next_wake_times(settings.with_projects([resolved]), now=now).get(resolved)
        wakes += [wake] if wake else []
    moment = now or datetime.now(UTC)
    wakes += [next_daily(s.daily, moment) for s in schedulers if s.daily is not None]
    wake = min(wakes, default=None)
    return {
        "next_wake": wake.isoformat() if wake else None,
        "scheduled_by": [s.describe() for s in schedulers],
        "daemon_running": holder is not None,
        "daemon": holder.to_dict() if holder else None,
        "night_in_progress": night.to_dict() if night else None,
        "daemon_last_outcome": record.last_outcome if record else None,
        "daemon_last_night_finished": record.last_night_finished if record else None,
    }
