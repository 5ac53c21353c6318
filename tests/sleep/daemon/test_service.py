"""The daemon in-process: real APScheduler, real files, a fake night runner, short times."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import anyio
import pytest
from structlog.testing import capture_logs

from skillopt.errors import ConfigError
from skillopt_sleep.daemon.cron import build_trigger, next_wake_times
from skillopt_sleep.daemon.health import daemon_holder, project_health
from skillopt_sleep.daemon.service import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    Daemon,
    DaemonConfig,
    NightRequest,
    NightSummary,
    WakeReason,
    utc_now,
)
from skillopt_sleep.daemon.settings import DaemonSettings, ProjectSchedule
from skillopt_sleep.daemon.state import STATE_FILE, read_daemon_state
from skillopt_sleep.lock import project_key, project_lock
from skillopt_sleep.night_end import RunStatus


@dataclass
class FakeNights:
    """Records each night; a night lasts ``seconds`` (or until ``release`` is set)."""

    seconds: float = 0.0
    release: anyio.Event | None = None
    calls: list[tuple[NightRequest, datetime]] = field(default_factory=list)
    finalized: list[str] = field(default_factory=list)
    active: int = 0
    peak: int = 0
    started: anyio.Event = field(default_factory=anyio.Event)
    changed: anyio.Event = field(default_factory=anyio.Event)

    async def wait_finished(self, count: int = 1) -> None:
        with anyio.fail_after(60):  # a safety net only: this waits on events
            while len(self.finalized) < count:
                await self.changed.wait()

    async def __call__(self, request: NightRequest) -> NightSummary:
        self.calls.append((request, utc_now()))
        self.active += 1
        self.peak = max(self.peak, self.active)
        self.started.set()
        try:
            if self.release is not None:
                await self.release.wait()
            else:
                await anyio.sleep(self.seconds)
            return NightSummary(status=RunStatus.COMPLETE, calls=3, tokens=120)
        finally:
            self.active -= 1
            self.finalized.append(request.key)
            self.changed.set()
            self.changed = anyio.Event()


def _config(state: Path, runner: FakeNights, projects: list[Path], **daemon: Any) -> DaemonConfig:
    settings = DaemonSettings(projects=[ProjectSchedule(path=p) for p in projects], **daemon)
    return DaemonConfig(settings=settings, state_dir=state, runner=runner)


def _far_time() -> str:
    """A daily time about 12 h away, so no natural fire happens during a test."""
    return (datetime.now().astimezone() + timedelta(hours=12)).strftime("%H:%M:%S")


@asynccontextmanager
async def running(daemon: Daemon) -> AsyncIterator[dict[str, int]]:
    result: dict[str, int] = {}

    async def _run() -> None:
        result["exit"] = await daemon.run()

    async with anyio.create_task_group() as tg:
        tg.start_soon(_run)
        with anyio.fail_after(60):
            await daemon.ready.wait()
        yield result
        daemon.request_stop()


async def _until_logged(logs: list[dict[str, Any]], event: str) -> None:
    """Captured logs have no event to wait on; poll them (test side only)."""
    with anyio.fail_after(60):
        while not _events(logs, event):  # noqa: ASYNC110
            await anyio.sleep(0.01)


def _events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name]


@pytest.mark.slow  # waits for a wall-clock time 3 s ahead
async def test_job_fires_at_configured_time(tmp_path: Path) -> None:
    nights = FakeNights()
    # far enough ahead that a slow start on a busy machine is still ready before it
    target = datetime.now().astimezone().replace(microsecond=0) + timedelta(seconds=3)
    config = _config(tmp_path / "s", nights, [tmp_path / "p"], time=target.strftime("%H:%M:%S"))
    daemon = Daemon(lambda: config)
    with capture_logs() as logs:
        async with running(daemon) as result:
            with anyio.fail_after(60):
                await nights.started.wait()
            await nights.wait_finished()
    (request, at), *_ = nights.calls
    assert request.reason is WakeReason.SCHEDULED
    assert request.project.path == tmp_path / "p"
    # on time: late by milliseconds on an idle machine (the margin is for a loaded one)
    assert target <= at < target + timedelta(seconds=20)
    assert result["exit"] == EXIT_OK
    [night] = _events(logs, "daemon.night")
    assert night["outcome"] == "complete" and night["calls"] == 3 and night["tokens"] == 120
    assert night["duration_s"] >= 0
    [wake] = _events(logs, "daemon.wake")
    assert wake["action"] == "night" and wake["late_s"] < 20
    record = read_daemon_state(tmp_path / "s")[project_key(tmp_path / "p")]
    assert record.last_outcome == "complete" and record.last_night_started is not None


async def test_coalesce_turns_three_missed_wakes_into_one_night(tmp_path: Path) -> None:
    nights = FakeNights()
    config = _config(
        tmp_path / "s",
        nights,
        [tmp_path / "p"],
        time=_far_time(),
        misfire_grace_seconds=5 * 86400,
    )
    daemon = Daemon(lambda: config)
    with capture_logs() as logs:
        async with running(daemon):
            # Simulate a host suspended for three days: the next run time is 3 fires ago.
            [job] = daemon.scheduler.get_jobs()
            daemon.scheduler.modify_job(job.id, next_run_time=job.next_run_time - timedelta(days=3))
            daemon.scheduler.wakeup()
            await nights.wait_finished()
            await anyio.wait_all_tasks_blocked()  # a second fire would be running by now
    assert len(nights.calls) == 1
    wakes = _events(logs, "daemon.wake")
    assert len(wakes) == 1
    # fires missed 2.5, 1.5 and 0.5 days ago: the one night is for the latest
    assert 43000 < wakes[0]["late_s"] < 44000


async def test_wake_beyond_misfire_grace_is_logged_not_run(tmp_path: Path) -> None:
    nights = FakeNights()
    config = _config(
        tmp_path / "s", nights, [tmp_path / "p"], time=_far_time(), misfire_grace_seconds=60
    )
    daemon = Daemon(lambda: config)
    with capture_logs() as logs:
        async with running(daemon):
            [job] = daemon.scheduler.get_jobs()
            daemon.scheduler.modify_job(job.id, next_run_time=job.next_run_time - timedelta(days=1))
            daemon.scheduler.wakeup()
            await _until_logged(logs, "daemon.wake_missed")
    assert nights.calls == []


def _seed_state(state: Path, project: Path, *, first_seen: datetime, last: datetime | None) -> None:
    key = project_key(project)
    record = {
        "path": str(project),
        "first_seen": first_seen.isoformat(),
        "last_fire": None,
        "last_night_started": last.isoformat() if last else None,
        "last_night_finished": None,
        "last_outcome": None,
    }
    state.mkdir(parents=True, exist_ok=True)
    (state / STATE_FILE).write_text(json.dumps({"version": 1, "projects": {key: record}}))


async def test_catch_up_runs_exactly_once(tmp_path: Path) -> None:
    state, project = tmp_path / "s", tmp_path / "p"
    now = utc_now()
    _seed_state(state, project, first_seen=now - timedelta(days=9), last=now - timedelta(days=4))
    nights = FakeNights()
    config = _config(state, nights, [project], time=_far_time())
    async with running(Daemon(lambda: config)):
        await nights.wait_finished()
        await anyio.wait_all_tasks_blocked()
    assert [r.reason for r, _ in nights.calls] == [WakeReason.CATCH_UP]
    assert nights.calls[0][0].scheduled_for is not None
    # Restarting does not catch up again: the missed night has run.
    async with running(Daemon(lambda: config)):
        await anyio.wait_all_tasks_blocked()  # catch-up is dispatched before ready
    assert len(nights.calls) == 1


async def test_no_catch_up_on_first_start_or_when_disabled(tmp_path: Path) -> None:
    state, project = tmp_path / "s", tmp_path / "p"
    nights = FakeNights()
    async with running(Daemon(lambda: _config(state, nights, [project], time=_far_time()))):
        await anyio.wait_all_tasks_blocked()
    assert nights.calls == []
    now = utc_now()
    _seed_state(state, project, first_seen=now - timedelta(days=3), last=None)
    config = _config(state, nights, [project], time=_far_time(), catch_up=False)
    async with running(Daemon(lambda: config)):
        await anyio.wait_all_tasks_blocked()
    assert nights.calls == []


async def test_catch_up_honours_an_external_last_night(tmp_path: Path) -> None:
    """A night run by hand (``once``) after the missed fire counts."""
    state, project = tmp_path / "s", tmp_path / "p"
    now = utc_now()
    _seed_state(state, project, first_seen=now - timedelta(days=9), last=now - timedelta(days=4))
    nights = FakeNights()
    base = _config(state, nights, [project], time=_far_time())
    config = DaemonConfig(
        settings=base.settings, state_dir=state, runner=nights, last_night_at=lambda _: now
    )
    async with running(Daemon(lambda: config)):
        await anyio.wait_all_tasks_blocked()
    assert nights.calls == []


async def test_locked_project_is_skipped_and_retried_next_start(tmp_path: Path) -> None:
    state, project = tmp_path / "s", tmp_path / "p"
    now = utc_now()
    _seed_state(state, project, first_seen=now - timedelta(days=3), last=None)
    nights = FakeNights()
    config = _config(state, nights, [project], time=_far_time())
    with capture_logs() as logs, project_lock(state, project, command="once"):
        async with running(Daemon(lambda: config)):
            await _until_logged(logs, "daemon.night")
    assert nights.calls == []
    [night] = _events(logs, "daemon.night")
    assert night["outcome"] == "locked" and "once" in night["detail"]
    async with running(Daemon(lambda: config)):
        await nights.wait_finished()
    assert len(nights.calls) == 1


@pytest.mark.parametrize("limit", [1, 2])
async def test_nights_overlap_up_to_the_limit(tmp_path: Path, limit: int) -> None:
    state = tmp_path / "s"
    projects = [tmp_path / "a", tmp_path / "b"]
    now = utc_now()
    records = {}
    for p in projects:
        records[project_key(p)] = {
            "path": str(p),
            "first_seen": (now - timedelta(days=3)).isoformat(),
        }
    state.mkdir()
    (state / STATE_FILE).write_text(json.dumps({"version": 1, "projects": records}))
    nights = FakeNights(seconds=0.3)
    config = _config(state, nights, projects, time=_far_time(), max_concurrent_nights=limit)
    async with running(Daemon(lambda: config)):
        await nights.wait_finished(2)
    assert nights.peak == limit


async def test_stop_lets_a_short_night_finish(tmp_path: Path) -> None:
    state, project = tmp_path / "s", tmp_path / "p"
    _seed_state(state, project, first_seen=utc_now() - timedelta(days=3), last=None)
    nights = FakeNights(seconds=0.3)
    config = _config(state, nights, [project], time=_far_time(), shutdown_grace_seconds=600)
    daemon = Daemon(lambda: config)
    with anyio.fail_after(60):  # the 0.3 s night, not the 600 s grace
        async with running(daemon) as result:
            await nights.started.wait()
            daemon.request_stop()
    assert result["exit"] == EXIT_OK
    assert read_daemon_state(state)[project_key(project)].last_outcome == "complete"


async def test_stop_cancels_a_long_night_after_grace(tmp_path: Path) -> None:
    state, project = tmp_path / "s", tmp_path / "p"
    _seed_state(state, project, first_seen=utc_now() - timedelta(days=3), last=None)
    nights = FakeNights(release=anyio.Event())
    config = _config(state, nights, [project], time=_far_time(), shutdown_grace_seconds=0.3)
    daemon = Daemon(lambda: config)
    with capture_logs() as logs, anyio.fail_after(60):  # the night alone never ends
        async with running(daemon) as result:
            await nights.started.wait()
            daemon.request_stop()
            t0 = anyio.current_time()
    assert anyio.current_time() - t0 >= 0.3  # the night had its grace
    assert result["exit"] == EXIT_INTERRUPTED
    assert nights.finalized == [project_key(project)]  # the night's finalizer ran
    [night] = _events(logs, "daemon.night")
    assert night["outcome"] == "aborted"
    record = read_daemon_state(state)[project_key(project)]
    assert record.last_outcome == "aborted" and record.last_night_started is None
    assert daemon_holder(state) is None
    # Aborted is not done: the next start resumes it through catch-up.
    nights2 = FakeNights()
    config2 = _config(state, nights2, [project], time=_far_time())
    async with running(Daemon(lambda: config2)):
        await nights2.wait_finished()
    assert [r.reason for r, _ in nights2.calls] == [WakeReason.CATCH_UP]


async def test_immediate_stop_does_not_wait_for_grace(tmp_path: Path) -> None:
    state, project = tmp_path / "s", tmp_path / "p"
    _seed_state(state, project, first_seen=utc_now() - timedelta(days=3), last=None)
    nights = FakeNights(release=anyio.Event())
    config = _config(state, nights, [project], time=_far_time(), shutdown_grace_seconds=600)
    daemon = Daemon(lambda: config)
    with anyio.fail_after(60):  # not the 600 s grace
        async with running(daemon) as result:
            await nights.started.wait()
            daemon.request_stop()
            await anyio.wait_all_tasks_blocked()  # the stop is being handled: grace running
            daemon.request_stop(immediate=True)
    assert result["exit"] == EXIT_INTERRUPTED


async def test_reload_applies_good_config_and_keeps_old_on_bad(tmp_path: Path) -> None:
    state = tmp_path / "s"
    nights = FakeNights()
    current: dict[str, Any] = {"config": _config(state, nights, [tmp_path / "a"], time="03:00")}

    def loader() -> DaemonConfig:
        value = current["config"]
        if isinstance(value, Exception):
            raise value
        assert isinstance(value, DaemonConfig)
        return value

    daemon = Daemon(loader)
    with capture_logs() as logs:
        async with running(daemon):
            assert daemon_holder(state) is not None
            current["config"] = ConfigError("expected HH:MM", key="daemon.time")
            assert daemon.reload() is False
            assert [j.name for j in daemon.scheduler.get_jobs()] == [str(tmp_path / "a")]
            current["config"] = _config(
                state, nights, [tmp_path / "a", tmp_path / "b"], time="04:00"
            )
            assert daemon.reload() is True
            names = sorted(j.name for j in daemon.scheduler.get_jobs())
            assert names == [str(tmp_path / "a"), str(tmp_path / "b")]
            assert all(j.next_run_time.hour == 4 for j in daemon.scheduler.get_jobs())
            current["config"] = _config(tmp_path / "elsewhere", nights, [tmp_path / "a"])
            assert daemon.reload() is False
    failures = _events(logs, "daemon.reload_failed")
    assert len(failures) == 2
    assert "daemon.time" in failures[0]["reason"]
    assert "state_dir" in failures[1]["reason"]


async def test_second_daemon_on_same_state_dir_is_refused(tmp_path: Path) -> None:
    from skillopt.errors import LockHeldError

    config = _config(tmp_path / "s", FakeNights(), [tmp_path / "p"], time=_far_time())
    async with running(Daemon(lambda: config)):
        with pytest.raises(LockHeldError):
            await Daemon(lambda: config).run()


async def test_no_projects_is_a_config_error(tmp_path: Path) -> None:
    config = _config(tmp_path / "s", FakeNights(), [])
    with pytest.raises(ConfigError) as info:
        await Daemon(lambda: config).run()
    assert info.value.key == "daemon.projects"


def test_next_wake_times(tmp_path: Path) -> None:
    settings = DaemonSettings(
        timezone="UTC",
        projects=[
            ProjectSchedule(path=tmp_path / "a"),
            ProjectSchedule(path=tmp_path / "b", time="23:15"),
            ProjectSchedule(path=tmp_path / "c", cron="0 9 * * 1"),
            ProjectSchedule(path=tmp_path / "d", enabled=False),
        ],
    )
    now = datetime(2026, 11, 25, 23, 30, tzinfo=ZoneInfo("UTC"))  # a Wednesday
    wakes = next_wake_times(settings, now=now)
    assert set(wakes) == {tmp_path / "a", tmp_path / "b", tmp_path / "c"}
    assert wakes[tmp_path / "a"] == datetime(2026, 11, 26, 2, 30, tzinfo=ZoneInfo("UTC"))
    assert wakes[tmp_path / "b"] == datetime(2026, 11, 26, 23, 15, tzinfo=ZoneInfo("UTC"))
    # crontab weekday 1 is Monday
    assert wakes[tmp_path / "c"] == datetime(2026, 11, 30, 9, 0, tzinfo=ZoneInfo("UTC"))


async def test_project_health_for_status(tmp_path: Path) -> None:
    state, project = tmp_path / "s", tmp_path / "p"
    _seed_state(state, project, first_seen=utc_now() - timedelta(days=3), last=None)
    nights = FakeNights(release=anyio.Event())
    config = _config(state, nights, [project], time="02:30", timezone="UTC")
    before = project_health(config.settings, state, project, crontab=lambda: "")
    assert before["daemon_running"] is False and before["night_in_progress"] is None
    assert before["next_wake"] is None  # no daemon runs: nothing schedules the night
    async with running(Daemon(lambda: config)):
        await nights.started.wait()
        during = project_health(config.settings, state, project, crontab=lambda: "")
        assert nights.release is not None
        nights.release.set()
        await nights.wait_finished()
    assert during["daemon_running"] is True and during["daemon"]["command"] == "daemon"
    assert during["next_wake"].endswith("02:30:00+00:00")
    assert during["scheduled_by"] == [f"daemon (running, pid {os.getpid()})"]
    assert "daemon night" in during["night_in_progress"]["command"]
    after = project_health(config.settings, state, project)
    assert after["daemon_running"] is False and after["night_in_progress"] is None
    assert after["daemon_last_outcome"] == "complete"


def test_trigger_carries_jitter_and_zone(tmp_path: Path) -> None:
    settings = DaemonSettings(jitter_seconds=120, timezone="Asia/Tokyo")
    project = ProjectSchedule(path=tmp_path)
    trigger = build_trigger(settings, project)
    assert trigger.jitter == 120 and str(trigger.timezone) == "Asia/Tokyo"
    assert build_trigger(settings, project, jitter=False).jitter is None
    bad = DaemonSettings(projects=[ProjectSchedule(path=tmp_path, cron="0 25 * * *")])
    with pytest.raises(ConfigError) as info:  # hour 25: only the scheduler range-checks
        build_trigger(bad, bad.projects[0])
    assert info.value.key == "daemon.projects.0"


async def test_a_schedule_that_never_fires_is_a_config_error(tmp_path: Path) -> None:
    nights = FakeNights()
    config = DaemonConfig(
        settings=DaemonSettings(projects=[ProjectSchedule(path=tmp_path, cron="0 0 31 2 *")]),
        state_dir=tmp_path / "s",
        runner=nights,
    )
    with pytest.raises(ConfigError, match="never fires"):
        await Daemon(lambda: config).run()


async def test_a_full_disk_fails_the_night_with_one_line_not_a_crash(tmp_path: Path) -> None:
    import errno

    state, project = tmp_path / "s", tmp_path / "p"
    now = utc_now()
    _seed_state(state, project, first_seen=now - timedelta(days=3), last=None)
    done = anyio.Event()

    async def full_disk(request: NightRequest) -> NightSummary:
        done.set()
        raise OSError(errno.ENOSPC, "No space left on device", str(state / "run.json"))

    config = _config(state, FakeNights(), [project], time=_far_time())
    config = DaemonConfig(settings=config.settings, state_dir=state, runner=full_disk)
    with capture_logs() as logs:
        async with running(Daemon(lambda: config)):
            await _until_logged(logs, "daemon.night")
    assert done.is_set() and not _events(logs, "daemon.night_crashed")
    [night] = _events(logs, "daemon.night")
    assert night["outcome"] == "failed" and night["detail"].startswith("disk full writing")
