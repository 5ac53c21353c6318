"""A CLI stopped while it works is asked to stop first (SIGTERM), and killed only after
a grace: agent CLIs clean up on SIGTERM (codex removes the mount targets its sandbox made
in /tmp), and a killed one leaves them behind. One that ignores the request is killed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from skillopt.backends.cli import process as cli_process
from skillopt.backends.cli.process import run_process
from skillopt.backends.cli.proctree import terminate_tree
from skillopt.errors import BackendTimeoutError
from support.fake_cli import wait_dead
from support.real_cli import find_cli

pytestmark = pytest.mark.skipif(sys.platform.startswith("win"), reason="POSIX signals")

# installs its SIGTERM handling, says so in ``ready``, then works until stopped
WORKER = """
import os, signal, sys, time
ready, cleaned, mode = sys.argv[1:4]
def tidy(*_):
    open(cleaned, "w").write(str(os.getpid()))
    sys.exit(0)
signal.signal(signal.SIGTERM, tidy if mode == "tidy" else signal.SIG_IGN)
open(ready, "w").write(str(os.getpid()))
while True:
    time.sleep(0.05)
"""


async def _until(path: Path) -> None:
    with anyio.fail_after(60):
        while not await anyio.Path(path).exists():  # noqa: ASYNC110 - a file has no event
            await anyio.sleep(0.02)


def _argv(tmp_path: Path, mode: str) -> list[str]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    ready, cleaned = tmp_path / "ready", tmp_path / "cleaned"
    return [sys.executable, str(script), str(ready), str(cleaned), mode]


async def test_a_cancelled_cli_is_asked_to_stop_and_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_process, "STOP_GRACE_S", 60.0)  # ends when the group is gone
    argv = _argv(tmp_path, "tidy")
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: run_process(argv, cwd=tmp_path, env=dict(os.environ),
                                          time_limit=600))  # fmt: skip
        await _until(tmp_path / "ready")
        tg.cancel_scope.cancel()
    assert (tmp_path / "cleaned").read_text() == (tmp_path / "ready").read_text()


async def test_a_timed_out_cli_is_asked_to_stop_and_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_process, "STOP_GRACE_S", 60.0)  # ends when the group is gone
    argv = _argv(tmp_path, "tidy")
    with pytest.raises(BackendTimeoutError):
        await run_process(argv, cwd=tmp_path, env=dict(os.environ), time_limit=1.0)
    assert (tmp_path / "cleaned").exists()


async def test_a_cli_ignoring_the_request_is_killed_after_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_process, "STOP_GRACE_S", 0.2)
    argv = _argv(tmp_path, "ignore")
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: run_process(argv, cwd=tmp_path, env=dict(os.environ),
                                          time_limit=600))  # fmt: skip
        await _until(tmp_path / "ready")
        tg.cancel_scope.cancel()
    assert not (tmp_path / "cleaned").exists()
    assert wait_dead(int((tmp_path / "ready").read_text()))


def test_windows_has_no_stop_request() -> None:
    assert terminate_tree(4242, platform="win32") is False


@pytest.mark.realcli
async def test_a_cancelled_codex_sandbox_leaves_no_mount_targets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real codex: its workspace-write sandbox makes ``.git``/``.codex``/``.agents``
    in each writable root that lacks them (here the working folder) and removes them when
    asked to stop; killed outright, it left them (in /tmp too, for every user)."""
    codex = find_cli("codex")
    if codex is None:
        pytest.skip("codex CLI not installed (make tools)")
    monkeypatch.setattr(cli_process, "STOP_GRACE_S", 60.0)  # ends when the group is gone
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "CODEX_HOME"} | {"HOME": str(home)}
    argv = [codex, "sandbox", "-c", 'sandbox_mode="workspace-write"', "--", "sleep", "120"]
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: run_process(argv, cwd=work, env=env, time_limit=600))
        await _until(work / ".codex")
        tg.cancel_scope.cancel()
    assert not {".git", ".codex", ".agents"} & {p.name for p in work.iterdir()}


# a wrapper (dies at once on SIGTERM) over a worker that takes a moment to clean up
WRAPPER = """
import subprocess, sys
child = subprocess.Popen([sys.executable, sys.argv[1], *sys.argv[2:]])
child.wait()
"""
SLOW_TIDY = """
import os, signal, sys, time
ready, cleaned = sys.argv[1:3]
def tidy(*_):
    time.sleep(0.5)
    open(cleaned, "w").write(str(os.getpid()))
    sys.exit(0)
signal.signal(signal.SIGTERM, tidy)
open(ready, "w").write(str(os.getpid()))
while True:
    time.sleep(0.05)
"""


async def test_the_grace_waits_for_the_whole_group_not_just_the_wrapper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a long grace: the wait ends when the group is gone, and a busy machine may be slow
    monkeypatch.setattr(cli_process, "STOP_GRACE_S", 60.0)
    wrapper, worker = tmp_path / "wrapper.py", tmp_path / "worker.py"
    wrapper.write_text(WRAPPER)
    worker.write_text(SLOW_TIDY)
    ready, cleaned = tmp_path / "ready", tmp_path / "cleaned"
    argv = [sys.executable, str(wrapper), str(worker), str(ready), str(cleaned)]
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: run_process(argv, cwd=tmp_path, env=dict(os.environ),
                                          time_limit=600))  # fmt: skip
        await _until(ready)
        tg.cancel_scope.cancel()
    assert cleaned.read_text() == ready.read_text()
