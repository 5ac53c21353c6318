"""What schedules nights for a project on this machine, found read-only, for ``status``.

A next scheduled night is only real when something will start it: a running daemon (or an
enabled systemd daemon service) that knows the project, an enabled systemd timer, a line
in the user's crontab, a launchd agent or a Windows task, each as ``skillopt-sleep schedule
install`` writes them. :func:`find_schedulers` lists what it finds; the OS schedulers' daily time is
read from their own files, so a config edited since the install does not mislead.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from skillopt_sleep.daemon.settings import DaemonSettings
from skillopt_sleep.lock import project_key
from skillopt_sleep.schedule import MARKER_TEXT, Kind, default_root
from skillopt_sleep.schedule_windows import XML_ENCODING

__all__ = ["Scheduler", "find_schedulers", "next_daily", "read_crontab"]

CRONTAB_TIMEOUT_S = 5.0
DAEMON_SERVICE = "skillopt-sleep-daemon.service"

_ON_CALENDAR = re.compile(r"^OnCalendar=\*-\*-\* (\d{1,2}):(\d{2})(?::(\d{2}))?\s*$", re.M)
_TASK_TIME = re.compile(r"<StartBoundary>[^T<]*T(\d{2}):(\d{2}):(\d{2})")
_PLIST_TIME = re.compile(
    r"<key>Hour</key>\s*<integer>(\d+)</integer>\s*<key>Minute</key>\s*<integer>(\d+)</integer>"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Scheduler:
    """One thing that starts nights for the project."""

    kind: str  # daemon | systemd-daemon | systemd | cron | launchd | task-scheduler
    where: str  # a pid, a unit file, "crontab"
    daily: tuple[int, int, int] | None = None  # local time an OS scheduler fires at

    def describe(self) -> str:
        return f"{self.kind} ({self.where})"


def read_crontab() -> str:
    """The user's crontab ("" when there is none, ``crontab`` is missing or fails)."""
    try:
        done = subprocess.run(
            ["crontab", "-l"], capture_output=True, timeout=CRONTAB_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.decode(errors="replace") if done.returncode == 0 else ""


def _ours(path: Path, encoding: str = "utf-8") -> str | None:
    try:
        text = path.read_bytes().decode(encoding)
    except (OSError, UnicodeDecodeError):
        return None
    return text if MARKER_TEXT in text else None


def find_schedulers(
    settings: DaemonSettings,
    project: Path,
    *,
    daemon_pid: int | None,
    daemon_knows: bool,
    crontab: Callable[[], str] = read_crontab,
) -> list[Scheduler]:
    """What starts nights for ``project``: ``daemon_pid`` is the running daemon's, if any;
    ``daemon_knows`` whether a daemon schedules this project (configured, or recorded in
    its state file)."""
    found: list[Scheduler] = []
    knows = daemon_knows or any(p.path == project for p in settings.enabled_projects())
    if daemon_pid is not None and knows:
        found.append(Scheduler(kind="daemon", where=f"running, pid {daemon_pid}"))
    systemd = default_root(Kind.SYSTEMD)
    service = systemd / DAEMON_SERVICE
    enabled = systemd / "default.target.wants" / DAEMON_SERVICE
    if daemon_pid is None and knows and enabled.exists() and _ours(service) is not None:
        found.append(Scheduler(kind="systemd-daemon", where=str(service)))
    key = project_key(project)
    timer = systemd / f"skillopt-sleep-{key}.timer"
    text = _ours(timer)
    if text is not None and (systemd / "timers.target.wants" / timer.name).exists():
        match = _ON_CALENDAR.search(text)
        daily = (int(match[1]), int(match[2]), int(match[3] or 0)) if match else None
        found.append(Scheduler(kind="systemd", where=str(timer), daily=daily))
    marker = f"# skillopt-sleep:{key}"
    for line in crontab().splitlines():
        fields = line.split()
        if marker in line and len(fields) > 2 and fields[0].isdigit() and fields[1].isdigit():
            daily = (int(fields[1]), int(fields[0]), 0)
            found.append(Scheduler(kind="cron", where="crontab", daily=daily))
            break
    plist = default_root(Kind.LAUNCHD) / f"com.skillopt.sleep.{key}.plist"
    text = _ours(plist)
    if text is not None:
        match = _PLIST_TIME.search(text)
        daily = (int(match[1]), int(match[2]), 0) if match else None
        found.append(Scheduler(kind="launchd", where=str(plist), daily=daily))
    task = default_root(Kind.TASK_SCHEDULER) / f"skillopt-sleep-{key}.xml"
    text = _ours(task, XML_ENCODING)
    if text is not None:
        match = _TASK_TIME.search(text)
        daily = (int(match[1]), int(match[2]), int(match[3])) if match else None
        found.append(Scheduler(kind="task-scheduler", where=str(task), daily=daily))
    return found


def next_daily(daily: tuple[int, int, int], now: datetime) -> datetime:
    """The next local time ``daily`` after ``now`` (an OS scheduler's clock is local)."""
    local = now.astimezone()
    hour, minute, second = daily
    at = local.replace(hour=hour, minute=minute, second=second, microsecond=0)
    return at if at > local else at + timedelta(days=1)
