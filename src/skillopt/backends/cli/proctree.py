"""A child process started as the root of a tree that can be killed whole, POSIX or Windows.

1. POSIX: the child gets a session of its own (``start_new_session``), so it leads a new
   process group; the group (node wrappers, native binaries, whatever they spawned) is
   killed with ``SIGKILL``, even after its leader exited. A tree stopped while it works
   is first asked to stop (:func:`terminate_tree`, ``SIGTERM``) and killed only after a
   short grace: an agent CLI cleans up on ``SIGTERM`` (codex's sandbox removes the
   ``.git``/``.codex``/``.agents`` mount targets it made in ``/tmp``; killed, it leaves
   them, and Claude Code then takes ``/tmp`` for a project root).
2. Windows has no process groups of that kind: the child starts with
   ``CREATE_NEW_PROCESS_GROUP`` (a Ctrl+C meant for us does not reach it), and the tree is
   killed with ``taskkill /PID <pid> /T /F`` (the process and every descendant, forcibly).
   ``taskkill`` finds descendants through their living root, so once the root has exited
   its tree cannot be found, and its pid may already belong to another process: an exited
   root is left alone there.

The platform is a parameter (default: this machine's) so both branches run in tests.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

__all__ = [
    "CREATE_NEW_PROCESS_GROUP",
    "STOP_GRACE_S",
    "TASKKILL_TIMEOUT_S",
    "group_alive",
    "is_windows",
    "kill_tree",
    "spawn_options",
    "terminate_tree",
]

CREATE_NEW_PROCESS_GROUP = 0x00000200  # subprocess.CREATE_NEW_PROCESS_GROUP, on every OS
TASKKILL_TIMEOUT_S = 10.0
STOP_GRACE_S = 3.0  # how long a tree asked to stop may take before it is killed

Runner = Callable[..., Any]


def is_windows(platform: str | None = None) -> bool:
    return (platform or sys.platform).startswith("win")


def spawn_options(platform: str | None = None) -> dict[str, Any]:
    """Keyword arguments for :func:`subprocess.Popen` / :func:`anyio.open_process` that
    make the child the root of its own tree."""
    if is_windows(platform):
        return {"creationflags": CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def kill_tree(
    pid: int,
    *,
    exited: bool = False,
    platform: str | None = None,
    run: Runner = subprocess.run,
) -> None:
    """Kill the tree rooted at ``pid`` (started with :func:`spawn_options`); a tree already
    gone is no error. ``exited``: the root has exited (Windows then leaves it alone)."""
    if not is_windows(platform):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        return
    if exited:
        return
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        run(
            ["taskkill", "/PID", str(pid), "/T", "/F"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=TASKKILL_TIMEOUT_S,
            check=False,
        )


def terminate_tree(pid: int, *, platform: str | None = None) -> bool:
    """Ask the tree rooted at ``pid`` to stop (POSIX: ``SIGTERM`` to its group); whether
    it was asked. Windows has no such request for console programs: the caller goes
    straight to :func:`kill_tree` there."""
    if is_windows(platform):
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def group_alive(pid: int, *, platform: str | None = None) -> bool:
    """Whether any process of the group led by ``pid`` is left (POSIX; on Windows the
    tree cannot be found once its root exited: ``False``)."""
    if is_windows(platform):
        return False
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
