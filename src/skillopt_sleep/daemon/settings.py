"""Settings of the ``[daemon]`` section: when each project's night runs and how it stops.

Pure data and validation only (no scheduler import). A night is scheduled either at a daily
``time`` ("HH:MM" or "HH:MM:SS", local to ``timezone``) or by a ``cron`` expression (five
crontab fields, or six with a leading seconds field). Crontab weekday numbers (0 or 7 =
Sunday) are translated to names here so they mean what cron users expect.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from skillopt.errors import ConfigError

__all__ = [
    "DEFAULT_TIME",
    "CronExpression",
    "CronSpec",
    "DaemonSettings",
    "ProjectSchedule",
    "TimeOfDay",
    "load_daemon_settings",
    "parse_cron",
    "parse_time",
]

DEFAULT_TIME = "02:30"
_TIME_RE = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
_FIELD_RE = re.compile(r"^[A-Za-z0-9*,/-]+$")
_DOW_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")


@dataclass(frozen=True, kw_only=True)
class CronSpec:
    """Cron fields in the scheduler's vocabulary (weekdays as names)."""

    second: str = "0"
    minute: str = "0"
    hour: str = "*"
    day: str = "*"
    month: str = "*"
    day_of_week: str = "*"

    def describe(self) -> str:
        return " ".join(
            [self.second, self.minute, self.hour, self.day, self.month, self.day_of_week]
        )


def parse_time(value: str) -> CronSpec:
    """ "HH:MM" or "HH:MM:SS" -> a daily CronSpec; ValueError if out of range."""
    match = _TIME_RE.match(value.strip())
    if not match:
        raise ValueError(f"expected HH:MM or HH:MM:SS, got {value!r}")
    hour, minute, second = int(match[1]), int(match[2]), int(match[3] or 0)
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"time out of range: {value!r}")
    return CronSpec(second=str(second), minute=str(minute), hour=str(hour))


def _dow_item(item: str) -> str:
    base, _, step = item.partition("/")
    if base == "*" or not re.fullmatch(r"\d+(-\d+)?", base):
        return item  # "*", "*/2" or names: already fine
    lo, _, hi = base.partition("-")
    first, last = int(lo), int(hi or lo)
    if not (0 <= first <= 7 and 0 <= last <= 7 and first <= last):
        raise ValueError(f"day of week out of range: {item!r}")
    if not hi and not step:
        return _DOW_NAMES[first]
    days = range(first, last + 1 if hi else 8, int(step) if step else 1)
    return ",".join(dict.fromkeys(_DOW_NAMES[d] for d in days))


def parse_cron(expr: str) -> CronSpec:
    """Five crontab fields (min hour dom mon dow) or six with seconds first."""
    fields = expr.split()
    if len(fields) == 5:
        fields = ["0", *fields]
    if len(fields) != 6:
        raise ValueError(f"expected 5 or 6 cron fields, got {len(fields)} in {expr!r}")
    for field in fields:
        if not _FIELD_RE.match(field):
            raise ValueError(f"bad cron field {field!r}")
    dow = ",".join(_dow_item(item) for item in fields[5].split(","))
    return CronSpec(
        second=fields[0],
        minute=fields[1],
        hour=fields[2],
        day=fields[3],
        month=fields[4],
        day_of_week=dow,
    )


def _checked(parse: Callable[[str], CronSpec]) -> Callable[[str], str]:
    def check(value: str) -> str:
        parse(value)  # raises ValueError with the reason
        return value

    return check


TimeOfDay = Annotated[str, AfterValidator(_checked(parse_time))]  # "HH:MM[:SS]", local
CronExpression = Annotated[str, AfterValidator(_checked(parse_cron))]  # five fields


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProjectSchedule(_Model):
    """One project the daemon runs nights for; unset fields fall back to the daemon default."""

    path: Path
    time: TimeOfDay | None = None
    cron: CronExpression | None = None
    enabled: bool = True

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        expanded = value.expanduser()
        if not expanded.is_absolute():
            raise ValueError(f"project path must be absolute, got {str(value)!r}")
        return expanded

    @model_validator(mode="after")
    def _one_schedule(self) -> ProjectSchedule:
        if self.time is not None and self.cron is not None:
            raise ValueError("set either time or cron for a project, not both")
        return self


class DaemonSettings(_Model):
    """The ``[daemon]`` section of the sleep config."""

    time: TimeOfDay = DEFAULT_TIME
    cron: CronExpression | None = None
    timezone: str | None = Field(default=None, description="IANA name; None = local time")
    jitter_seconds: int = Field(default=0, ge=0, le=6 * 3600)
    misfire_grace_seconds: int = Field(default=3600, ge=1)
    catch_up: bool = True
    shutdown_grace_seconds: float = Field(default=30.0, gt=0, le=3600)
    max_concurrent_nights: int = Field(default=1, ge=1, le=64)
    projects: list[ProjectSchedule] = Field(default_factory=list)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError) as exc:
                raise ValueError(f"unknown time zone {value!r}") from exc
        return value

    @model_validator(mode="after")
    def _unique_projects(self) -> DaemonSettings:
        seen: set[Path] = set()
        for project in self.projects:
            if project.path in seen:
                raise ValueError(f"project listed twice: {project.path}")
            seen.add(project.path)
        return self

    def schedule_for(self, project: ProjectSchedule) -> CronSpec:
        """The effective schedule of ``project``: its own, else the daemon default."""
        if project.cron is not None:
            return parse_cron(project.cron)
        if project.time is not None:
            return parse_time(project.time)
        if self.cron is not None:
            return parse_cron(self.cron)
        return parse_time(self.time)

    def enabled_projects(self) -> list[ProjectSchedule]:
        return [p for p in self.projects if p.enabled]

    def with_projects(self, extra: list[Path]) -> DaemonSettings:
        """Add projects (e.g. from ``--project``) that are not configured yet."""
        known = {p.path for p in self.projects}
        added = [ProjectSchedule(path=p) for p in extra if p not in known]
        return self.model_copy(update={"projects": [*self.projects, *added]})


def _key_path(loc: tuple[int | str, ...], prefix: str) -> str:
    parts = [prefix] if prefix else []
    parts.extend(str(item) for item in loc)
    return ".".join(parts)


def load_daemon_settings(
    data: Mapping[str, Any] | None, *, source: str | None = None, prefix: str = "daemon"
) -> DaemonSettings:
    """Validate a ``[daemon]`` table; errors become ConfigError naming the key path."""
    try:
        return DaemonSettings.model_validate(dict(data or {}))
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        raise ConfigError(
            message, key=_key_path(tuple(first["loc"]), prefix), source=source
        ) from exc
