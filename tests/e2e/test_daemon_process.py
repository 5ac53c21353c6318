"""`python -m skillopt_sleep daemon` as a real subprocess: signals, grace, reload."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from skillopt_sleep.lock import project_key

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
pytest.importorskip("skillopt_sleep.config", reason="the sleep config loader has not landed yet")
SLEEPING_DAEMON = Path(__file__).resolve().parents[1] / "support" / "sleeping_daemon.py"


def write_config(path: Path, state: Path, project: Path, **daemon: Any) -> None:
    lines = [f"state_dir = {json.dumps(str(state))}", "", "[daemon]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in daemon.items()]
    lines += ["", "[[daemon.projects]]", f"path = {json.dumps(str(project))}"]
    path.write_text("\n".join(lines) + "\n")


@dataclass
class Daemonproc:
    process: Process
    events: list[dict[str, Any]] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    changed: anyio.Event = field(default_factory=anyio.Event)

    async def pump(self) -> None:
        assert self.process.stderr is not None
        buffer = ""
        async for chunk in TextReceiveStream(self.process.stderr):
            buffer += chunk
            *lines, buffer = buffer.split("\n")
            for line in lines:
                self.raw.append(line)
                try:
                    self.events.append(json.loads(line))
                except ValueError:
                    continue
            self.changed.set()
            self.changed = anyio.Event()

    def named(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == name]

    async def wait_for(
        self, predicate: Callable[[], bool], limit: float = 60, what: str = ""
    ) -> None:
        try:
            with anyio.fail_after(limit):
                while not predicate():
                    await self.changed.wait()
        except TimeoutError:
            tail = "\n".join(self.raw[-20:])
            raise AssertionError(f"timed out waiting for {what}; stderr tail:\n{tail}") from None

    def send(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)


@asynccontextmanager
async def daemon_process(config: Path, night_seconds: float) -> AsyncIterator[Daemonproc]:
    """The real daemon, with nights that only sleep (tests/support/sleeping_daemon.py)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("SKILLOPT_SLEEP__STATE_DIR", None)
    argv = [sys.executable, str(SLEEPING_DAEMON), str(night_seconds), "daemon",
            "--config", str(config)]  # fmt: skip
    async with running_daemon(argv, env) as proc:
        yield proc


@asynccontextmanager
async def running_daemon(argv: list[str], env: dict[str, str]) -> AsyncIterator[Daemonproc]:
    """The daemon as a real subprocess with its output pumped; killed if still alive."""
    process = await anyio.open_process(argv, env=env, stdin=None)
    proc = Daemonproc(process)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(proc.pump)
            yield proc
            with anyio.fail_after(60):
                await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def run_records(state: Path, project: Path) -> list[dict[str, Any]]:
    runs = state / "projects" / project_key(project) / "runs"
    return [json.loads(p.read_text()) for p in sorted(runs.glob("*/run.json"))]


@pytest.mark.slow
async def test_sigterm_aborts_a_long_night_within_grace_and_leaves_it_resumable(
    tmp_path: Path,
) -> None:
    state, project, cfg = tmp_path / "state", tmp_path / "my project", tmp_path / "sleep.toml"
    project.mkdir()
    write_config(cfg, state, project, cron="* * * * * *", shutdown_grace_seconds=0.5)
    async with daemon_process(cfg, 600) as proc:
        await proc.wait_for(lambda: bool(proc.named("daemon.wake")), what="first wake")
        await proc.wait_for(lambda: bool(run_records(state, project)), what="run record")
        t0 = anyio.current_time()
        proc.send(signal.SIGTERM)
        with anyio.fail_after(60):  # the 0.5 s grace, not the 600 s night
            await proc.process.wait()
        elapsed = anyio.current_time() - t0
    assert elapsed >= 0.5, elapsed
    assert proc.process.returncode == 130
    [night] = proc.named("daemon.night")
    assert night["outcome"] == "aborted"
    [record] = run_records(state, project)
    assert record["status"] == "aborted" and record["resumable"] is True
    assert proc.named("daemon.stopped")


@pytest.mark.slow
async def test_sigterm_lets_a_short_night_finish(tmp_path: Path) -> None:
    state, project, cfg = tmp_path / "state", tmp_path / "p", tmp_path / "sleep.toml"
    project.mkdir()
    write_config(cfg, state, project, cron="* * * * * *", shutdown_grace_seconds=10.0)
    async with daemon_process(cfg, 0.8) as proc:
        await proc.wait_for(lambda: bool(run_records(state, project)), what="run record")
        proc.send(signal.SIGTERM)
        with anyio.fail_after(60):  # the 0.8 s night finishes within the 10 s grace
            await proc.process.wait()
    assert proc.process.returncode == 0
    nights = proc.named("daemon.night")
    assert [n["outcome"] for n in nights] == ["complete"]
    assert [r["status"] for r in run_records(state, project)] == ["complete"]


@pytest.mark.slow
async def test_second_signal_cancels_at_once(tmp_path: Path) -> None:
    state, project, cfg = tmp_path / "state", tmp_path / "p", tmp_path / "sleep.toml"
    project.mkdir()
    write_config(cfg, state, project, cron="* * * * * *", shutdown_grace_seconds=600.0)
    async with daemon_process(cfg, 600) as proc:
        await proc.wait_for(lambda: bool(run_records(state, project)), what="run record")
        proc.send(signal.SIGTERM)
        await proc.wait_for(lambda: bool(proc.named("daemon.stopping")), what="stopping")
        proc.send(signal.SIGINT)
        with anyio.fail_after(60):  # at once, not after the 600 s grace
            await proc.process.wait()
    assert proc.process.returncode == 130
    assert [r["status"] for r in run_records(state, project)] == ["aborted"]


@pytest.mark.slow
async def test_sighup_with_broken_config_keeps_the_old_one(tmp_path: Path) -> None:
    state, project, cfg = tmp_path / "state", tmp_path / "p", tmp_path / "sleep.toml"
    project.mkdir()
    write_config(cfg, state, project, cron="* * * * * *", shutdown_grace_seconds=5.0)
    async with daemon_process(cfg, 0.1) as proc:
        await proc.wait_for(lambda: len(proc.named("daemon.night")) >= 1, what="first night")
        cfg.write_text(cfg.read_text().replace('cron = "* * * * * *"', 'cron = "every night"'))
        proc.send(signal.SIGHUP)
        await proc.wait_for(lambda: bool(proc.named("daemon.reload_failed")), what="reload fail")
        seen = len(proc.named("daemon.night"))
        await proc.wait_for(
            lambda: len(proc.named("daemon.night")) >= seen + 2, what="nights after bad reload"
        )
        proc.send(signal.SIGTERM)
    [failure] = proc.named("daemon.reload_failed")
    assert "daemon.cron" in failure["reason"]
    assert proc.process.returncode == 0


async def test_bad_config_at_start_exits_2(tmp_path: Path) -> None:
    state, project, cfg = tmp_path / "state", tmp_path / "p", tmp_path / "sleep.toml"
    write_config(cfg, state, project, time="25:99")
    async with daemon_process(cfg, 1) as proc:
        pass
    assert proc.process.returncode == 2
    assert any("daemon.time" in line for line in proc.raw)


@asynccontextmanager
async def demo_daemon(*extra: str) -> AsyncIterator[Daemonproc]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "skillopt_sleep", "daemon", "--demo", *extra]
    async with running_daemon(argv, env) as proc:
        yield proc


def _demo_root(proc: Daemonproc) -> Path:
    [demo] = proc.named("daemon.demo")
    return Path(demo["root"])


@pytest.mark.slow
async def test_demo_daemon_runs_real_nights_and_stops_cleanly(tmp_path: Path) -> None:
    async with demo_daemon("--every", "2") as proc:
        await proc.wait_for(lambda: bool(proc.named("daemon.night")), limit=120, what="a night")
        reported = await anyio.Path(proc.named("daemon.night")[0]["run_dir"], "report.md").is_file()
        proc.send(signal.SIGTERM)
    first, *later = proc.named("daemon.night")
    assert first["outcome"] == "complete" and first["calls"] > 0 and first["tokens"] > 0
    assert reported
    # On a busy machine the next night may already be running when the signal lands; the
    # exit code says whether one was cut short (its calls drained, then aborted).
    assert [n["outcome"] for n in later] in ([], ["aborted"]), later
    assert proc.process.returncode == (130 if later else 0)
    assert proc.named("daemon.stopped")
    assert not _demo_root(proc).exists()  # the temp demo is gone with the daemon


@pytest.mark.slow
async def test_sigterm_mid_real_night_leaves_it_resumable(tmp_path: Path) -> None:
    state = tmp_path / "demo-state"  # --state-dir keeps the demo (and its night) after exit
    async with demo_daemon(
        "--state-dir",
        str(state),
        # 3 s calls: the rest of the night outlasts any lag in reading its log
        "--every",
        "2",
        "--demo-latency",
        "3",
        "--shutdown-grace",
        "0.5",
    ) as proc:
        await proc.wait_for(
            lambda: any(e.get("stage") == "harvest" for e in proc.named("night.stage_done")),
            limit=120,
            what="harvest done",
        )
        proc.send(signal.SIGTERM)
        with anyio.fail_after(60):
            await proc.process.wait()
    assert proc.process.returncode == 130
    [night] = proc.named("daemon.night")
    assert night["outcome"] == "aborted"
    assert _demo_root(proc) == state / "demo"
    [run_json] = list(state.glob("projects/*/runs/*/run.json"))
    record = json.loads(run_json.read_text())
    assert record["status"] == "aborted"

    # The next night resumes it rather than starting over.
    from skillopt_sleep.demo import demo_in
    from skillopt_sleep.night.entry import run_night

    setup = demo_in(state)
    outcome = await run_night(setup.config, project=setup.project)
    assert outcome.resumed is True
    assert outcome.status.value == "complete"


@pytest.mark.slow
async def test_once_exits_2_while_a_daemon_night_holds_the_lock(tmp_path: Path) -> None:
    state, project, cfg = tmp_path / "state", tmp_path / "p", tmp_path / "sleep.toml"
    project.mkdir()
    write_config(cfg, state, project, cron="* * * * * *", shutdown_grace_seconds=0.2)
    async with daemon_process(cfg, 30) as proc:
        await proc.wait_for(lambda: bool(run_records(state, project)), what="run record")
        once = await anyio.run_process(
            [sys.executable, "-m", "skillopt_sleep", "once", "--config", str(cfg),
             "--project", str(project)],
            check=False,
        )  # fmt: skip
        proc.send(signal.SIGTERM)
    assert once.returncode == 2
    assert b"daemon night" in once.stderr
