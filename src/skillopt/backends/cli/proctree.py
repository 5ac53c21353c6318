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

3. A process that leaves the group (``setsid``: a helper daemon an agent CLI starts) is out
   of the group's reach. Where ``/proc`` exists (Linux) the tree is also found by process:
   each call's child is started with a mark in its environment (:data:`TREE_ENV`, one
   value a call, inherited by everything it starts), and a stop or kill reaches, besides
   the group, every process below the root (by parent) and every process holding the
   mark, even one re-parented after its parent exited. Elsewhere only the group is
   reached.

The platform is a parameter (default: this machine's) so both branches run in tests.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "CREATE_NEW_PROCESS_GROUP",
    "STOP_GRACE_S",
    "TASKKILL_TIMEOUT_S",
    "TREE_ENV",
    "escaped",
    "group_alive",
    "is_windows",
    "kill_tree",
    "new_mark",
    "spawn_options",
    "terminate_tree",
]

CREATE_NEW_PROCESS_GROUP = 0x00000200  # subprocess.CREATE_NEW_PROCESS_GROUP, on every OS
TASKKILL_TIMEOUT_S = 10.0
STOP_GRACE_S = 3.0  # how long a tree asked to stop may take before it is killed

TREE_ENV = "SKILLOPT_PROCESS_TREE"  # the environment mark every process of one call inherits
_PROC = Path("/proc")

Runner = Callable[..., Any]


def new_mark() -> str:
    """A fresh value of :data:`TREE_ENV` for one call's process tree."""
    return secrets.token_hex(12)


def _parents() -> dict[int, int]:
    """Every process's parent, from ``/proc/<pid>/stat`` ({} where there is no ``/proc``)."""
    found: dict[int, int] = {}
    try:
        names = [entry.name for entry in os.scandir(_PROC) if entry.name.isdigit()]
    except OSError:
        return found
    for name in names:
        try:
            stat = (_PROC / name / "stat").read_text()
            found[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile, or not ours to read
    return found


def _marked(mark: str, pids: Iterable[int]) -> set[int]:
    """The processes among ``pids`` whose environment holds ``TREE_ENV=mark``."""
    needle = f"{TREE_ENV}={mark}".encode()
    found = set()
    for pid in pids:
        try:
            environ = (_PROC / str(pid) / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.add(pid)
    return found


def escaped(
    pid: int, mark: str = "", *, by_parent: bool = True, platform: str | None = None
) -> set[int]:
    """Processes of the tree rooted at ``pid`` that are not in its process group: below it
    by parent (``by_parent``: only while the root lives, its pid being its own), or holding
    its ``mark`` (POSIX with ``/proc``; empty elsewhere)."""
    if is_windows(platform):
        return set()
    parents = _parents()
    below: set[int] = set()
    frontier = [pid] if by_parent else []
    while frontier:
        parent = frontier.pop()
        children = [child for child, up in parents.items() if up == parent and child not in below]
        below.update(children)
        frontier.extend(children)
    if mark:
        below |= _marked(mark, parents)
    out = set()
    for other in below - {pid}:
        try:
            if os.getpgid(other) != pid:
                out.add(other)
        except OSError:
            continue
    return out


def _signal_escaped(pids: Iterable[int], signum: int) -> None:
    for other in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(other, signum)


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
    mark: str = "",
) -> None:
    """Kill the tree rooted at ``pid`` (started with :func:`spawn_options`, its environment
    holding ``mark``); a tree already gone is no error. ``exited``: the root has exited
    (Windows then leaves it alone)."""
    if not is_windows(platform):
        # found before the group dies (its members' children would re-parent)
        away = escaped(pid, mark, by_parent=not exited)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        _signal_escaped(away, signal.SIGKILL)
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


def terminate_tree(pid: int, *, platform: str | None = None, mark: str = "") -> bool:
    """Ask the tree rooted at ``pid`` to stop (POSIX: ``SIGTERM`` to its group and to its
    processes outside it); whether it was asked. Windows has no such request for console
    programs: the caller goes straight to :func:`kill_tree` there."""
    if is_windows(platform):
        return False
    away = escaped(pid, mark)
    _signal_escaped(away, signal.SIGTERM)
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return bool(away)
    return True


def group_alive(pid: int, *, platform: str | None = None, mark: str = "") -> bool:
    """Whether any process of the tree rooted at ``pid`` is left: its group, or (with
    ``mark``) a process holding the mark outside it (POSIX; on Windows the tree cannot be
    found once its root exited: ``False``)."""
    if is_windows(platform):
        return False
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return bool(mark) and bool(_living(_marked(mark, _parents())))
    except PermissionError:
        return True
    return True


def _living(pids: Iterable[int]) -> set[int]:
    """``pids`` that are not zombies (a killed process its parent has not reaped yet)."""
    out = set()
    for pid in pids:
        try:
            state = (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            out.add(pid)
    return out
