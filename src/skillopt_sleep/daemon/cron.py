"""The daemon's cron maths: one APScheduler ``CronTrigger`` per project, and its next fire.

The daemon schedules with these; ``status`` and ``schedule`` use them to say when the next
night is and to refuse a schedule that never fires. A bad cron field is a ConfigError.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from apscheduler.triggers.cron import CronTrigger

from skillopt.errors import ConfigError
from skillopt_sleep.daemon.settings import DaemonSettings, ProjectSchedule
from skillopt_sleep.lock import project_key

__all__ = [
    "Jobs",
    "build_trigger",
    "next_fire_after",
    "next_wake_times",
    "schedule_jobs",
    "scheduler_zone",
]


def scheduler_zone(settings: DaemonSettings) -> ZoneInfo | None:
    """The configured zone; None lets APScheduler use the machine's local zone (DST-aware)."""
    return ZoneInfo(settings.timezone) if settings.timezone else None


def build_trigger(
    settings: DaemonSettings, project: ProjectSchedule, *, jitter: bool = True
) -> CronTrigger:
    """The CronTrigger of one project; a bad cron field becomes a ConfigError."""
    spec = settings.schedule_for(project)
    try:
        return CronTrigger(
            second=spec.second,
            minute=spec.minute,
            hour=spec.hour,
            day=spec.day,
            month=spec.month,
            day_of_week=spec.day_of_week,
            timezone=scheduler_zone(settings),
            jitter=(settings.jitter_seconds or None) if jitter else None,
        )
    except ValueError as exc:
        index = settings.projects.index(project) if project in settings.projects else None
        key = f"daemon.projects.{index}" if index is not None else "daemon"
        raise ConfigError(f"invalid schedule ({spec.describe()}): {exc}", key=key) from exc


def next_fire_after(trigger: CronTrigger, instant: datetime) -> datetime | None:
    """First fire time strictly after ``instant`` (jitter ignored)."""
    fire: datetime | None = trigger.get_next_fire_time(None, instant + timedelta(microseconds=1))
    return fire


def next_wake_times(
    settings: DaemonSettings, *, now: datetime | None = None
) -> dict[Path, datetime]:
    """Next scheduled night per enabled project (before jitter), for ``status``."""
    current = now or datetime.now(ZoneInfo("UTC"))
    out: dict[Path, datetime] = {}
    for project in settings.enabled_projects():
        fire = next_fire_after(build_trigger(settings, project, jitter=False), current)
        if fire is not None:
            out[project.path] = fire
    return out


Jobs = dict[str, tuple[ProjectSchedule, CronTrigger]]


def schedule_jobs(settings: DaemonSettings, *, now: datetime) -> Jobs:
    """One trigger per enabled project, keyed by project key; what the daemon refuses to
    start with (no enabled project, a schedule that never fires) is a ConfigError."""
    projects = settings.enabled_projects()
    if not projects:
        raise ConfigError("no enabled project to schedule", key="daemon.projects")
    jobs = {project_key(p.path): (p, build_trigger(settings, p)) for p in projects}
    for project, trigger in jobs.values():
        if next_fire_after(trigger, now) is None:
            index = settings.projects.index(project)
            raise ConfigError(
                f"the schedule of {project.path} never fires", key=f"daemon.projects.{index}"
            )
    return jobs
