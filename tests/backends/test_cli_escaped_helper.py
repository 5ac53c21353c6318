"""Issue 32 item 4: a helper an agent CLI starts in a session of its own (``setsid``) is out
of the CLI's process group, and survived the night's stop. The tree is also found by
process (below the root, or holding the call's environment mark): a cancelled, timed-out
or finished call leaves no such helper running."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from skillopt.backends.cli import process as cli_process
from skillopt.backends.cli.process import run_process
from skillopt.errors import BackendTimeoutError
from support.fake_cli import pid_alive, wait_dead
from support.handoff_agent import until

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

# starts a helper in a new session (it leaves the group, as `setsid` does), says its pid,
# then works until stopped ("work") or exits at once, leaving the helper behind ("leave")
CLI = """
import subprocess, sys, time
helper_file, mode = sys.argv[1:3]
helper = subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(1)"],
                          start_new_session=True)
open(helper_file + ".tmp", "w").write(str(helper.pid))
import os
os.replace(helper_file + ".tmp", helper_file)
if mode == "leave":
    print("done")
    sys.exit(0)
while True:
    time.sleep(0.05)
"""


async def _helper_pid(path: Path) -> int:
    with anyio.fail_after(60):
        await until(path.exists)  # the CLI writes it: a file has no event
    return int(await anyio.Path(path).read_text())


def _argv(tmp_path: Path, mode: str) -> list[str]:
    script = tmp_path / "cli.py"
    script.write_text(CLI)
    return [sys.executable, str(script), str(tmp_path / "helper.pid"), mode]


def _gone(pid: int) -> bool:
    alive = not wait_dead(pid, within=30)
    if alive:  # leave nothing behind, whatever the test says
        os.kill(pid, 9)
    return not alive


async def test_a_cancelled_call_stops_a_helper_that_left_the_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_process, "STOP_GRACE_S", 0.5)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: run_process(_argv(tmp_path, "work"), cwd=tmp_path,
                                          env=dict(os.environ), time_limit=600))  # fmt: skip
        helper = await _helper_pid(tmp_path / "helper.pid")
        assert pid_alive(helper) and os.getpgid(helper) == helper  # its own group
        tg.cancel_scope.cancel()
    assert _gone(helper)


async def test_a_timed_out_call_stops_a_helper_that_left_the_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_process, "STOP_GRACE_S", 0.5)
    with pytest.raises(BackendTimeoutError):
        await run_process(_argv(tmp_path, "work"), cwd=tmp_path, env=dict(os.environ),
                          time_limit=2.0)  # fmt: skip
    assert _gone(await _helper_pid(tmp_path / "helper.pid"))


async def test_a_finished_call_leaves_no_helper_behind(tmp_path: Path) -> None:
    """The CLI exited first: its helper was re-parented, and is found by the mark."""
    done = await run_process(_argv(tmp_path, "leave"), cwd=tmp_path, env=dict(os.environ),
                             time_limit=60)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "done"
    assert _gone(await _helper_pid(tmp_path / "helper.pid"))
