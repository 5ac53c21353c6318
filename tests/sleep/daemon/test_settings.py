"""DaemonSettings validation: defaults, schedules, crontab weekdays, errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from skillopt.errors import ConfigError
from skillopt_sleep.daemon.settings import (
    CronSpec,
    DaemonSettings,
    ProjectSchedule,
    load_daemon_settings,
    parse_cron,
    parse_time,
)


def test_defaults() -> None:
    s = load_daemon_settings(None)
    assert s.time == "02:30" and s.catch_up is True and s.shutdown_grace_seconds == 30
    assert s.max_concurrent_nights == 1 and s.projects == [] and s.timezone is None


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("02:30", CronSpec(second="0", minute="30", hour="2")),
        ("7:05:09", CronSpec(second="9", minute="5", hour="7")),
    ],
)
def test_parse_time(text: str, spec: CronSpec) -> None:
    assert parse_time(text) == spec


@pytest.mark.parametrize("bad", ["24:00", "12:60", "2:3", "noon", "12:00:61", ""])
def test_parse_time_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_time(bad)


@pytest.mark.parametrize(
    ("expr", "dow", "second"),
    [
        ("30 2 * * *", "*", "0"),
        ("30 2 * * 0", "sun", "0"),
        ("30 2 * * 7", "sun", "0"),
        ("30 2 * * 1-5", "mon,tue,wed,thu,fri", "0"),
        ("30 2 * * 0-6/3", "sun,wed,sat", "0"),
        ("30 2 * * sat,sun", "sat,sun", "0"),
        ("*/5 * * * * *", "*", "*/5"),
    ],
)
def test_parse_cron(expr: str, dow: str, second: str) -> None:
    spec = parse_cron(expr)
    assert spec.day_of_week == dow and spec.second == second


@pytest.mark.parametrize("bad", ["* * *", "1 2 3 4 5 6 7", "30 2 * * 8", "30 2 * * ;rm"])
def test_parse_cron_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_cron(bad)


def test_schedule_precedence(tmp_path: Path) -> None:
    s = DaemonSettings(
        time="01:00",
        projects=[
            ProjectSchedule(path=tmp_path / "a"),
            ProjectSchedule(path=tmp_path / "b", time="05:00"),
            ProjectSchedule(path=tmp_path / "c", cron="0 6 * * *"),
        ],
    )
    hours = [s.schedule_for(p).hour for p in s.projects]
    assert hours == ["1", "5", "6"]
    assert DaemonSettings(cron="0 4 * * *").schedule_for(ProjectSchedule(path=tmp_path)).hour == "4"


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"time": "25:00"}, "daemon.time"),
        ({"timezone": "Mars/Olympus"}, "daemon.timezone"),
        ({"shutdown_grace_seconds": 0}, "daemon.shutdown_grace_seconds"),
        ({"max_concurrent_nights": 0}, "daemon.max_concurrent_nights"),
        ({"bogus": 1}, "daemon.bogus"),
        ({"projects": [{"path": "relative/dir"}]}, "daemon.projects.0.path"),
        ({"projects": [{"path": "/x", "time": "9"}]}, "daemon.projects.0.time"),
        ({"projects": [{"path": "/x", "cron": "* *"}]}, "daemon.projects.0.cron"),
        ({"projects": [{"path": "/x", "colour": "red"}]}, "daemon.projects.0.colour"),
    ],
)
def test_errors_name_the_key(data: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_daemon_settings(data, source="sleep.toml")
    assert info.value.key == key
    assert str(info.value).startswith(f"sleep.toml: {key}: ")


def test_duplicate_and_conflicting_projects_are_rejected() -> None:
    with pytest.raises(ConfigError, match="twice"):
        load_daemon_settings({"projects": [{"path": "/x"}, {"path": "/x"}]})
    with pytest.raises(ConfigError, match="either time or cron"):
        load_daemon_settings({"projects": [{"path": "/x", "time": "01:00", "cron": "0 1 * * *"}]})


def test_with_projects_adds_only_new(tmp_path: Path) -> None:
    s = DaemonSettings(projects=[ProjectSchedule(path=tmp_path / "a", time="04:00")])
    t = s.with_projects([tmp_path / "a", tmp_path / "b"])
    assert [p.path for p in t.projects] == [tmp_path / "a", tmp_path / "b"]
    assert t.projects[0].time == "04:00"
