"""A reload releases the replaced config's shared resources (the backend pool) as soon as no
night runs on it, instead of keeping every pool ever loaded open until the daemon stops."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import anyio

from skillopt_sleep.daemon import Daemon, DaemonConfig, NightRequest, NightStatus, NightSummary
from skillopt_sleep.daemon_settings import DaemonSettings, ProjectSchedule


class Tracked:
    """Configs whose ``aclose`` records that it ran; nights block until released."""

    def __init__(self, project: Path, state: Path) -> None:
        self.project, self.state = project, state
        self.closed: list[int] = []
        self.made = 0
        self.release = anyio.Event()
        self.started = anyio.Event()
        self.fire_at = ""

    async def night(self, request: NightRequest) -> NightSummary:
        self.started.set()
        await self.release.wait()
        return NightSummary(status=NightStatus.COMPLETE)

    def load(self) -> DaemonConfig:
        tag = self.made
        self.made += 1

        async def aclose() -> None:
            self.closed.append(tag)

        time = self.fire_at or (datetime.now().astimezone() + timedelta(hours=12)).strftime(
            "%H:%M:%S"
        )
        settings = DaemonSettings(projects=[ProjectSchedule(path=self.project)], time=time)
        return DaemonConfig(
            settings=settings, state_dir=self.state, runner=self.night, aclose=aclose
        )


async def _wait_for(predicate: object) -> None:
    with anyio.fail_after(3):
        while not predicate():  # type: ignore[operator]  # noqa: ASYNC110
            await anyio.sleep(0.01)


async def test_replaced_configs_are_released_when_idle(tmp_path: Path) -> None:
    tracked = Tracked(tmp_path / "p", tmp_path / "s")
    daemon = Daemon(tracked.load)
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        with anyio.fail_after(5):
            await daemon.ready.wait()
        assert daemon.reload() and daemon.reload()
        await _wait_for(lambda: tracked.closed == [0, 1])  # idle: released at once
        daemon.request_stop()
    assert tracked.closed == [0, 1, 2]  # the current one at stop, each exactly once


async def test_a_config_in_use_is_released_after_its_night(tmp_path: Path) -> None:
    tracked = Tracked(tmp_path / "p", tmp_path / "s")
    fire = datetime.now().astimezone().replace(microsecond=0) + timedelta(seconds=1)
    tracked.fire_at = fire.strftime("%H:%M:%S")
    daemon = Daemon(tracked.load)
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        with anyio.fail_after(5):
            await daemon.ready.wait()
        with anyio.fail_after(4):
            await tracked.started.wait()  # a night runs on config 0
        tracked.fire_at = ""
        assert daemon.reload()
        await anyio.sleep(0.1)
        assert tracked.closed == []  # still in use by the running night
        tracked.release.set()
        await _wait_for(lambda: tracked.closed == [0])
        daemon.request_stop()
    assert tracked.closed == [0, 1]
