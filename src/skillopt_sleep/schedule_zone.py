"""A daily time in ``daemon.timezone``, on the clock of schedulers that only know local time.

systemd's ``OnCalendar=`` takes a zone and the daemon schedules in it, so both follow the
configured zone through daylight saving time. cron and launchd fire on the machine's own
clock: for them the time is converted. The offset between two zones changes when either
switches to or from daylight saving time, so the conversion is checked over the year ahead
and a note says until when it holds and what it becomes after.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo

__all__ = ["MachineTime", "on_machine_clock"]

_HORIZON_DAYS = 366


@dataclass(frozen=True, kw_only=True)
class MachineTime:
    """The time of day to give cron or launchd, and what the user should know about it."""

    hour: int
    minute: int
    second: int
    note: str = ""


def _local(day: date, at: time, zone: ZoneInfo, machine: tzinfo | None) -> datetime:
    moment = datetime.combine(day, at, tzinfo=zone)
    return moment.astimezone(machine) if machine is not None else moment.astimezone()


def _hhmm(moment: datetime) -> str:
    return moment.strftime("%H:%M") + (moment.strftime(":%S") if moment.second else "")


def _reinstall_window(last_right: datetime, first_new: datetime) -> tuple[datetime, datetime]:
    """When installing again keeps every night: after the last night the old time is right
    (``last_right``, machine clock), and before both the old entry's next firing (the first
    wrong one, a machine day later) and the first night at the new time (``first_new``).
    Dates are the machine's: the zone's date of a night may be another."""
    next_old = datetime.combine(last_right.date() + timedelta(days=1), last_right.timetz())
    return last_right, min(next_old.replace(tzinfo=None), first_new.replace(tzinfo=None))


def _next_night(at: time, zone: ZoneInfo, after: datetime) -> date:
    """The zone's date of the first night at ``at`` after the instant ``after``."""
    day = after.astimezone(zone).date() - timedelta(days=1)
    while datetime.combine(day, at, tzinfo=zone) <= after:
        day += timedelta(days=1)
    return day


def on_machine_clock(
    at: time,
    zone_name: str | None,
    *,
    today: date,
    machine: tzinfo | None = None,
    after: datetime | None = None,
) -> MachineTime:
    """``at`` in ``zone_name`` as a time on the machine's clock (``machine``; None = the
    process's local zone, which is what cron and launchd use).

    The conversion holds from the zone's night of ``today``, or, given the instant
    ``after``, from the first night after it (so installing again inside the window a
    note gives converts for the new offset). Without a zone the time is already local.
    With one, the note names the converted time and, when daylight saving time will move
    it within a year, the time it becomes and when to install again.
    """
    if zone_name is None:
        return MachineTime(hour=at.hour, minute=at.minute, second=at.second)
    zone = ZoneInfo(zone_name)
    start = today if after is None else _next_night(at, zone, after)
    first = _local(start, at, zone, machine)
    change: tuple[date, datetime] | None = None
    for offset in range(1, _HORIZON_DAYS):
        day = start + timedelta(days=offset)
        moment = _local(day, at, zone, machine)
        if moment.time() != first.time():
            change = (day, moment)
            break
    result = MachineTime(hour=first.hour, minute=first.minute, second=first.second)
    if change is None and first.time() == at:
        return result  # the machine keeps the configured zone's time all year
    wanted = f"{at.strftime('%H:%M')} {zone_name} (daemon.timezone)"
    here = f"{_hhmm(first)} on this machine's clock ({first.tzname()})"
    if change is None:
        note = f"{wanted} is {here} all year; cron and launchd follow the machine's clock."
    else:
        day, moment = change
        start, end = _reinstall_window(_local(day - timedelta(days=1), at, zone, machine), moment)
        note = (
            f"{wanted} is {here} through {start.date().isoformat()}, then "
            f"{_hhmm(moment)} ({moment.tzname()}) from {moment.date().isoformat()}: cron and "
            "launchd follow the machine's clock, so run `skillopt-sleep schedule install` "
            f"again between {start:%Y-%m-%d %H:%M} and {end:%Y-%m-%d %H:%M} on this "
            "machine's clock (the systemd timer and the daemon follow the zone themselves)."
        )
    return MachineTime(hour=first.hour, minute=first.minute, second=first.second, note=note)
