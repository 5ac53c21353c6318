"""Killing an agent CLI's whole process tree: the POSIX branch for real (here), the Windows
branch with its commands recorded (``taskkill`` needs Windows; not run here)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
from typing import Any

import pytest

from skillopt.backends.cli.proctree import (
    CREATE_NEW_PROCESS_GROUP,
    TASKKILL_TIMEOUT_S,
    is_windows,
    kill_tree,
    spawn_options,
)


class Recorder:
    """Stands in for ``subprocess.run`` on the Windows branch: what would have run."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.calls: list[tuple[list[str], dict[str, Any]]] = []
        self.fail = fail

    def __call__(self, argv: list[str], **options: Any) -> None:
        self.calls.append((argv, options))
        if self.fail is not None:
            raise self.fail


def test_each_platform_starts_the_child_as_a_tree_root() -> None:
    assert spawn_options("linux") == {"start_new_session": True}
    assert spawn_options("darwin") == {"start_new_session": True}
    assert spawn_options("win32") == {"creationflags": CREATE_NEW_PROCESS_GROUP}
    assert is_windows("win32") and not is_windows("cygwin") and not is_windows("linux")


def test_windows_kills_the_tree_with_taskkill() -> None:
    run = Recorder()
    kill_tree(4242, platform="win32", run=run)
    ((argv, options),) = run.calls
    assert argv == ["taskkill", "/PID", "4242", "/T", "/F"]
    assert options["timeout"] == TASKKILL_TIMEOUT_S and options["check"] is False


def test_windows_leaves_an_exited_root_alone_and_never_raises() -> None:
    run = Recorder()
    kill_tree(4242, exited=True, platform="win32", run=run)  # its pid may be someone else's
    assert run.calls == []
    for failure in (FileNotFoundError("taskkill"), subprocess.TimeoutExpired("taskkill", 10)):
        kill_tree(4242, platform="win32", run=Recorder(fail=failure))


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="waits on a Linux pidfd")
def test_posix_kills_the_grandchildren_too() -> None:
    child = subprocess.Popen(
        ["sh", "-c", "sleep 300 & echo $!; wait"],
        stdout=subprocess.PIPE,
        text=True,
        **spawn_options(),
    )
    assert child.stdout is not None
    grandchild = os.pidfd_open(int(child.stdout.readline()))  # readable once it has exited
    try:
        kill_tree(child.pid)
        assert child.wait(timeout=30) == -signal.SIGKILL
        assert select.select([grandchild], [], [], 30)[0] == [grandchild]
    finally:
        os.close(grandchild)
        child.stdout.close()
    kill_tree(child.pid)  # a tree already gone is no error
