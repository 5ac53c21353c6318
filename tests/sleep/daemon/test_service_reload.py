"""A reload releases the replaced config's shared resources (the backend pool) as soon as no
night runs on it, instead of keeping every pool ever loaded open until the daemon stops."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import anyio

from skillopt_sleep.daemon.service import (
    Daemon,
    DaemonConfig,
    NightRequest,
    NightSummary,
)
from skillopt_sleep.daemon.settings import DaemonSettings, ProjectSchedule
from skillopt_sleep.night_end import RunStatus


class Tracked:
    """Configs whose ``aclose`` records that it ran; nights block until released."""

    def __init__(self, project: Path, state: Path) -> None:
        self.project, self.state = project, state
        self.closed: list[int] = []
        self.made = 0
        self.release = anyio.Event()
        self.started = anyio.Event()

    async def night(self, request: NightRequest) -> NightSummary:
        self.started.set()
        await self.release.wait()
        return NightSummary(status=RunStatus.COMPLETE)

    def load(self) -> DaemonConfig:
        tag = self.made
        self.made += 1

        async def aclose() -> None:
            self.closed.append(tag)

        time = (datetime.now().astimezone() + timedelta(hours=12)).strftime("%H:%M:%S")
        settings = DaemonSettings(projects=[ProjectSchedule(path=self.project)], time=time)
        return DaemonConfig(
            settings=settings, state_dir=self.state, runner=self.night, aclose=aclose
        )


async def _wait_for(predicate: object) -> None:
    with anyio.fail_after(60):  # a safety net: the predicate is what is waited for
        while not predicate():  # type: ignore[operator]  # noqa: ASYNC110
            await anyio.sleep(0.01)


async def test_replaced_configs_are_released_when_idle(tmp_path: Path) -> None:
    tracked = Tracked(tmp_path / "p", tmp_path / "s")
    daemon = Daemon(tracked.load)
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        with anyio.fail_after(60):
            await daemon.ready.wait()
        assert daemon.reload() and daemon.reload()
        await _wait_for(lambda: tracked.closed == [0, 1])  # idle: released at once
        daemon.request_stop()
    assert tracked.closed == [0, 1, 2]  # the current one at stop, each exactly once


async def test_a_config_in_use_is_released_after_its_night(tmp_path: Path) -> None:
    tracked = Tracked(tmp_path / "p", tmp_path / "s")
    daemon = Daemon(tracked.load)
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        with anyio.fail_after(60):
            await daemon.ready.wait()
        # The night's time comes now (no wall-clock fire time racing the start-up).
        [job] = daemon.scheduler.get_jobs()
        job.modify(next_run_time=datetime.now().astimezone())
        with anyio.fail_after(60):
            await tracked.started.wait()  # a night runs on config 0
        assert daemon.reload()
        await anyio.wait_all_tasks_blocked()  # the reload's release of idle configs ran
        assert tracked.closed == []  # still in use by the running night
        tracked.release.set()
        await _wait_for(lambda: tracked.closed == [0])
        daemon.request_stop()
    assert tracked.closed == [0, 1]
