"""The long-running ``skillopt-sleep daemon``: one asyncio process, one cron job per project.

APScheduler 3 is used only here, and only as a clock: each job's fire merely hands a
:class:`NightRequest` to our own task group, where nights run under structured
concurrency (a :class:`anyio.CapacityLimiter` bounds overlapping nights of different
projects; a per-project guard plus the project lock make one night per project at a time).

Lifecycle:
- start: take the daemon lock (one daemon per state dir), schedule jobs, then catch up a
  night missed while the daemon was down (at most one per project).
- SIGTERM/SIGINT: no new nights and (through the config's ``drain``) no new model calls;
  calls in flight get ``shutdown_grace_seconds`` to finish, then the nights are cancelled
  (their own finalizers mark the run aborted and resumable). Without ``drain``, nights get
  the grace period to finish. A second signal cancels at once. SIGHUP reloads the config;
  a bad config keeps the old one.

A night counts as "done" for catch-up when it completed or failed; an aborted night is
caught up (resumed) at the next start.

Around it: the trigger maths (:mod:`.cron`), the settings
(:mod:`.settings`), the catch-up record (:mod:`.state`), what ``status``
shows (:mod:`.health`) and the stop (:mod:`skillopt_sleep.shutdown`).
"""

from __future__ import annotations

import logging
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo

import anyio
from anyio.abc import TaskGroup, TaskStatus
from apscheduler.events import (
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    EVENT_JOB_SUBMITTED,
    JobEvent,
    JobSubmissionEvent,
)
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from skillopt.errors import ConfigError, LockHeldError, SkillOptError
from skillopt.logging import get_logger
from skillopt.redact import sanitize
from skillopt.signals import receives_signals, signal_receiver
from skillopt.storage_errors import storage_failures
from skillopt_sleep.daemon.cron import (
    Jobs,
    build_trigger,
    next_fire_after,
    schedule_jobs,
    scheduler_zone,
)
from skillopt_sleep.daemon.settings import DaemonSettings, ProjectSchedule
from skillopt_sleep.daemon.state import DaemonState, ProjectRecord
from skillopt_sleep.lock import daemon_lock, project_lock
from skillopt_sleep.night_end import RunStatus
from skillopt_sleep.rundir import Clock
from skillopt_sleep.shutdown import Drain, GracefulStop

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "ConfigLoader",
    "Daemon",
    "DaemonConfig",
    "NightRequest",
    "NightRunner",
    "NightSummary",
    "WakeOutcome",
    "WakeReason",
    "utc_now",
]


_log = get_logger(__name__)


EXIT_OK = 0
EXIT_INTERRUPTED = 130


def utc_now() -> datetime:
    return datetime.now(ZoneInfo("UTC"))


class WakeReason(StrEnum):
    SCHEDULED = "scheduled"
    CATCH_UP = "catch_up"


#: What came of one wake: how its night ended, or why no night ran: ``locked`` (another
#: process, ``once`` or a timer, holds the project lock), ``skipped`` (the daemon was
#: stopping before the night could start).
WakeOutcome = RunStatus | Literal["locked", "skipped"]

_COUNTS_AS_DONE = frozenset({RunStatus.COMPLETE, RunStatus.FAILED})


@dataclass(frozen=True, kw_only=True)
class NightRequest:
    project: ProjectSchedule
    key: str
    reason: WakeReason
    scheduled_for: datetime | None


@dataclass(frozen=True, kw_only=True)
class NightSummary:
    """What a night runner reports back; one log line per night is built from it."""

    status: WakeOutcome
    calls: int = 0
    tokens: int = 0
    run_dir: Path | None = None
    detail: str = ""


NightRunner = Callable[[NightRequest], Awaitable[NightSummary]]


@dataclass(frozen=True, kw_only=True)
class DaemonConfig:
    """Everything the daemon needs from one (re)load of the configuration."""

    settings: DaemonSettings
    state_dir: Path
    runner: NightRunner
    last_night_at: Callable[[Path], datetime | None] | None = None
    """Optional: when the project's last finished night started, from the night's own
    state (so a night run by hand also counts for catch-up)."""
    drain: Callable[[], Awaitable[None]] | None = None
    """Optional: on stop, refuse new model calls and return once the calls in flight have
    finished (the night is then cancelled without waiting out the grace period). Without
    it, a running night keeps working until it ends or the grace period is over."""
    aclose: Callable[[], Awaitable[None]] | None = None
    """Optional: release what the runner shares across nights (the backend pool); called
    once, when a reload has replaced this config and its last night ended, or at stop."""
    describe_aborted: Callable[[NightRequest], NightSummary | None] | None = None
    """Optional: what a cancelled night left behind (its run directory, the calls it paid
    for), read once it has unwound, so its log line is not 0 calls and no run directory."""


ConfigLoader = Callable[[], DaemonConfig]


def _iso(instant: datetime | None) -> str | None:
    return instant.isoformat() if instant else None


def _described(config: DaemonConfig, request: NightRequest, summary: NightSummary) -> NightSummary:
    """``summary`` completed from what the cancelled night left on disk, when known."""
    if config.describe_aborted is None:
        return summary
    try:
        return config.describe_aborted(request) or summary
    except (OSError, SkillOptError) as exc:
        _log.warning(
            "daemon.aborted_night_unread", project=str(request.project.path), error=str(exc)
        )
        return summary


# --------------------------------------------------------------------------- daemon


class Daemon:
    """Runs scheduled nights until asked to stop. Build, then ``await daemon.run()``."""

    def __init__(
        self,
        loader: ConfigLoader,
        *,
        clock: Clock = utc_now,
        handle_signals: bool = False,
    ) -> None:
        self._loader = loader
        self._clock = clock
        self._handle_signals = handle_signals
        self._stop = GracefulStop("daemon")
        self.ready = anyio.Event()
        self._stopping = False
        self._running: set[str] = set()
        self._aborted = 0
        self._fired_at: dict[str, datetime] = {}
        self._config: DaemonConfig | None = None
        self._scheduler: Any = None
        self._nights: TaskGroup | None = None
        self._limiter = anyio.CapacityLimiter(1)
        self._state: DaemonState | None = None
        self._projects: dict[str, ProjectSchedule] = {}
        self._loaded: list[DaemonConfig] = []
        self._users: Counter[int] = Counter()  # id(config) -> nights running on it

    # -- control (also used by signal handling) -------------------------------

    def request_stop(self, *, immediate: bool = False) -> None:
        self._stop.request(immediate=immediate)

    @property
    def config(self) -> DaemonConfig:
        if self._config is None:
            raise RuntimeError("daemon not started")
        return self._config

    @property
    def scheduler(self) -> Any:
        """The underlying APScheduler instance (tests use it to simulate a suspended host)."""
        return self._scheduler

    def reload(self) -> bool:
        """Re-read the config; on any problem keep the running one and log why."""
        old = self.config
        try:
            new = self._loader()
            if Path(new.state_dir) != Path(old.state_dir):
                raise ConfigError("cannot change on reload; restart the daemon", key="state_dir")
            jobs = self._jobs_for(new.settings)
        except Exception as exc:  # a reload must never take the daemon down
            _log.error("daemon.reload_failed", reason=sanitize(str(exc)), kept="previous config")
            return False
        self._config = new
        self._loaded.append(new)
        self._limiter.total_tokens = new.settings.max_concurrent_nights
        self._install_jobs(jobs)
        _log.info("daemon.reloaded", projects=len(jobs), next_wakes=self._next_wakes_log())
        if self._nights is not None:
            self._nights.start_soon(self._release_idle)
        return True

    # -- main loop ----------------------------------------------------------

    async def run(self) -> int:
        config = self._loader()
        self._loaded.append(config)
        try:
            return await self._run(config)
        finally:
            await self._release_all()

    async def _release_all(self) -> None:
        configs, self._loaded = self._loaded, []
        await self._release(configs)

    async def _release_idle(self) -> None:
        """Release configs a reload replaced once no night runs on them (no pool leaks
        over months of SIGHUPs)."""
        idle = [c for c in self._loaded if c is not self._config and not self._users[id(c)]]
        self._loaded = [c for c in self._loaded if c not in idle]
        await self._release(idle)

    async def _release(self, configs: list[DaemonConfig]) -> None:
        for config in configs:
            self._users.pop(id(config), None)
            if config.aclose is None:
                continue
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                try:
                    await config.aclose()
                except Exception as exc:
                    _log.warning("daemon.release_failed", error=sanitize(str(exc)))

    async def _run(self, config: DaemonConfig) -> int:
        jobs = self._jobs_for(config.settings)
        self._config = config
        async with daemon_lock(config.state_dir):
            self._state = DaemonState.load_or_reset(config.state_dir)
            known = set(self._state.projects)
            self._limiter.total_tokens = config.settings.max_concurrent_nights
            async with anyio.create_task_group() as outer:
                if self._handle_signals:
                    await outer.start(self._stop.watch_signals, signal.SIGTERM, signal.SIGINT)
                    await outer.start(self._watch_reload)
                async with anyio.create_task_group() as nights:
                    self._nights = nights
                    self._start_scheduler(jobs)
                    self._catch_up(known)
                    self.ready.set()
                    await self._stop.requested.wait()
                    self._stopping = True
                    self._scheduler.shutdown(wait=False)
                    grace = self.config.settings.shutdown_grace_seconds
                    _log.info("daemon.stopping", in_flight=sorted(self._running), grace_s=grace)
                    outer.start_soon(self._cancel_after_grace, nights, grace)
                outer.cancel_scope.cancel()
        _log.info("daemon.stopped", aborted_nights=self._aborted)
        return EXIT_INTERRUPTED if self._aborted else EXIT_OK

    async def _watch_reload(self, *, task_status: TaskStatus[None]) -> None:
        if not receives_signals():  # Windows: no SIGHUP; restart the daemon to reload
            task_status.started()
            return
        with signal_receiver(signal.SIGHUP) as signals:
            task_status.started()
            async for _ in signals:
                _log.info("daemon.signal", signal="SIGHUP", action="reload")
                if not self._stopping:
                    self.reload()

    async def _cancel_after_grace(self, nights: TaskGroup, grace: float) -> None:
        """Stop new work, let calls in flight finish (within ``grace``), then cancel."""
        drains = [c.drain for c in self._loaded]
        drain: Drain | None = None
        if self._running and None not in drains:  # else the nights run until they end or grace

            async def drain_all() -> None:
                for one in drains:
                    assert one is not None
                    await one()

            drain = drain_all
        await self._stop.cancel_after_drain(nights.cancel_scope, drain=drain, grace=grace)
        if self._running:
            _log.warning("daemon.cancelling_nights", projects=sorted(self._running))

    # -- scheduling ----------------------------------------------------------

    def _jobs_for(self, settings: DaemonSettings) -> Jobs:
        return schedule_jobs(settings, now=self._clock())

    def _start_scheduler(self, jobs: Jobs) -> None:
        logging.getLogger("apscheduler").setLevel(logging.ERROR)  # we log the events ourselves
        settings = self.config.settings
        self._scheduler = AsyncIOScheduler(
            timezone=scheduler_zone(settings),
            job_defaults={
                "coalesce": True,
                "max_instances": 1,
                "misfire_grace_time": settings.misfire_grace_seconds,
            },
        )
        self._scheduler.add_listener(
            self._on_scheduler_event,
            EVENT_JOB_SUBMITTED | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES,
        )
        self._scheduler.start()
        self._install_jobs(jobs)
        _log.info("daemon.started", projects=len(jobs), next_wakes=self._next_wakes_log())

    def _install_jobs(self, jobs: Jobs) -> None:
        self._scheduler.remove_all_jobs()
        self._projects = {key: project for key, (project, _) in jobs.items()}
        if self._state is not None:
            now = self._clock().isoformat()
            fresh = {
                key: ProjectRecord(path=str(project.path), first_seen=now)
                for key, project in self._projects.items()
                if key not in self._state.projects
            }
            if fresh:
                self._state.projects.update(fresh)
                self._state.save()
        settings = self.config.settings
        for key, (project, trigger) in jobs.items():
            self._scheduler.add_job(
                self._on_fire,
                trigger,
                args=[key],
                id=key,
                name=str(project.path),
                coalesce=True,
                max_instances=1,
                misfire_grace_time=settings.misfire_grace_seconds,
            )

    def _next_wakes_log(self) -> dict[str, str]:
        return {job.name: _iso(job.next_run_time) or "" for job in self._scheduler.get_jobs()}

    def _on_scheduler_event(self, event: JobEvent) -> None:
        if isinstance(event, JobSubmissionEvent) and event.code == EVENT_JOB_SUBMITTED:
            self._fired_at[event.job_id] = event.scheduled_run_times[-1]
        elif event.code == EVENT_JOB_MISSED:
            _log.warning(
                "daemon.wake_missed",
                key=event.job_id,
                scheduled_for=_iso(event.scheduled_run_time),
                reason="later than misfire_grace_seconds",
            )
        elif event.code == EVENT_JOB_MAX_INSTANCES:
            _log.warning("daemon.wake_skipped", key=event.job_id, reason="job still running")

    async def _on_fire(self, key: str) -> None:
        """APScheduler job body: hand the night to our task group and return at once."""
        self._dispatch(key, WakeReason.SCHEDULED, self._fired_at.pop(key, None))

    def _catch_up(self, known: set[str]) -> None:
        """Run (once) a night whose fire time passed since the last night or first sight."""
        assert self._state is not None
        now = self._clock()
        config = self.config
        if not config.settings.catch_up:
            return
        for key, project in self._projects.items():
            record = self._state.projects.get(key)
            if record is None or key not in known:
                continue  # first time we see this project: nothing was missed
            ref = datetime.fromisoformat(record.first_seen)
            if record.last_night_started:
                ref = max(ref, datetime.fromisoformat(record.last_night_started))
            if config.last_night_at is not None:
                external = config.last_night_at(project.path)
                if external is not None:
                    ref = max(ref, external)
            trigger = build_trigger(config.settings, project, jitter=False)
            missed = next_fire_after(trigger, ref)
            if missed is not None and missed <= now:
                _log.info("daemon.catch_up", project=str(project.path), missed=_iso(missed))
                self._dispatch(key, WakeReason.CATCH_UP, missed)

    # -- nights --------------------------------------------------------------

    def _dispatch(self, key: str, reason: WakeReason, scheduled_for: datetime | None) -> None:
        project = self._projects.get(key)
        now = self._clock()
        late = (now - scheduled_for).total_seconds() if scheduled_for else None
        fields = {
            "project": str(project.path) if project else key,
            "reason": str(reason),
            "scheduled_for": _iso(scheduled_for),
            "late_s": round(late, 3) if late is not None else None,
        }
        if project is None or self._nights is None:
            _log.warning("daemon.wake", **fields, action="ignored", why="project not configured")
            return
        if self._stopping:
            _log.info("daemon.wake", **fields, action="ignored", why="daemon stopping")
            return
        if key in self._running:
            _log.warning("daemon.wake", **fields, action="skipped", why="night already running")
            return
        _log.info("daemon.wake", **fields, action="night")
        if scheduled_for is not None and self._state is not None and key in self._state.projects:
            try:
                self._state.update(key, last_fire=scheduled_for.isoformat())
            except OSError as exc:  # bookkeeping only; the night still runs
                _log.error("daemon.state_write_failed", path=str(self._state.path), error=str(exc))
        self._running.add(key)
        request = NightRequest(project=project, key=key, reason=reason, scheduled_for=scheduled_for)
        self._nights.start_soon(self._night, request, self.config, name=f"night {key}")

    async def _night(self, request: NightRequest, config: DaemonConfig) -> None:
        started = self._clock()
        t0 = time.monotonic()
        summary = NightSummary(status=RunStatus.ABORTED, detail="cancelled")
        self._users[id(config)] += 1
        try:
            summary = await self._guarded_night(request, config)
        finally:
            if summary.status is RunStatus.ABORTED and summary.run_dir is None:
                summary = _described(config, request, summary)
            self._users[id(config)] -= 1
            self._running.discard(request.key)
            if summary.status is RunStatus.ABORTED:
                self._aborted += 1
            self._record(request, summary, started)
            _log.info(
                "daemon.night",
                project=str(request.project.path),
                reason=str(request.reason),
                outcome=str(summary.status),
                duration_s=round(time.monotonic() - t0, 3),
                calls=summary.calls,
                tokens=summary.tokens,
                run_dir=str(summary.run_dir) if summary.run_dir else None,
                detail=sanitize(summary.detail)[:500],
            )
            if config is not self._config and not self._users[id(config)]:
                await self._release_idle()

    async def _guarded_night(self, request: NightRequest, config: DaemonConfig) -> NightSummary:
        async with self._limiter:
            if self._stopping:
                return NightSummary(status="skipped", detail="daemon stopping")
            lock = project_lock(
                config.state_dir, request.project.path, command=f"daemon night ({request.reason})"
            )
            try:
                async with lock:
                    return await config.runner(request)
            except LockHeldError as exc:
                return NightSummary(status="locked", detail=str(exc))
            except SkillOptError as exc:
                return NightSummary(status=RunStatus.FAILED, detail=str(exc))
            except Exception as exc:  # one broken night must not end the daemon
                failure = storage_failures(exc)  # a full disk is said, not a crash
                if failure is not None:
                    return NightSummary(status=RunStatus.FAILED, detail=str(failure))
                _log.exception("daemon.night_crashed", project=str(request.project.path))
                return NightSummary(status=RunStatus.FAILED, detail=f"{type(exc).__name__}: {exc}")

    def _record(self, request: NightRequest, summary: NightSummary, started: datetime) -> None:
        state = self._state
        if state is None or request.key not in state.projects:
            return
        changes: dict[str, str | None] = {
            "last_outcome": str(summary.status),
            "last_night_finished": self._clock().isoformat(),
        }
        if summary.status in _COUNTS_AS_DONE:
            changes["last_night_started"] = started.isoformat()
        try:
            state.update(request.key, **changes)
        except OSError as exc:
            _log.error("daemon.state_write_failed", path=str(state.path), error=str(exc))
