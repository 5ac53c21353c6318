"""The per-project single-instance lock, with real processes holding real flocks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from skillopt.errors import LockHeldError
from skillopt_sleep.lock import (
    FileLock,
    daemon_lock,
    lock_is_held,
    pid_alive,
    project_key,
    project_lock,
    project_lock_path,
    read_holder,
)

HOLD_SCRIPT = textwrap.dedent(
    """
    import fcntl, json, os, socket, sys, time
    path, pid = sys.argv[1], int(sys.argv[2])
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    record = {"pid": pid or os.getpid(), "host": socket.gethostname(),
              "started_at": "2026-01-01T00:00:00+00:00", "command": "holder"}
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps(record).encode())
    print("held", flush=True)
    time.sleep(30)
    """
)


def _hold_in_child(path: Path, recorded_pid: int = 0) -> subprocess.Popen[str]:
    """A real process that flocks ``path`` and records ``recorded_pid`` (0: itself)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_SCRIPT, str(path), str(recorded_pid)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "held"
    return child


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_project_key_is_stable_and_safe(tmp_path: Path) -> None:
    nasty = tmp_path / "my proj; rm -rf $HOME"
    nasty.mkdir()
    key = project_key(nasty)
    assert key == project_key(nasty / ".." / nasty.name)
    assert "/" not in key and " " not in key and ";" not in key and "$" not in key
    assert key != project_key(tmp_path)


def test_acquire_writes_holder_and_release_clears(tmp_path: Path) -> None:
    lock = project_lock(tmp_path / "state", tmp_path / "proj", command="once")
    with lock:
        holder = read_holder(lock.path)
        assert holder is not None
        assert holder.pid == os.getpid()
        assert holder.command == "once"
        assert lock_is_held(lock.path) == holder
    assert lock.path == project_lock_path(tmp_path / "state", project_key(tmp_path / "proj"))
    assert lock.path.read_bytes() == b""
    assert lock_is_held(lock.path) is None


def test_second_starter_in_process_is_refused(tmp_path: Path) -> None:
    first = project_lock(tmp_path, tmp_path / "p", command="daemon night")
    second = project_lock(tmp_path, tmp_path / "p", command="once")
    with first, pytest.raises(LockHeldError) as info:
        second.acquire()
    assert info.value.holder["pid"] == os.getpid()
    assert "daemon night" in str(info.value)
    assert not second.held
    with second:  # free again after the first released
        pass


async def test_async_context_manager(tmp_path: Path) -> None:
    lock = project_lock(tmp_path, tmp_path / "p", command="once")
    async with lock:
        assert lock.held
        with pytest.raises(LockHeldError):
            async with project_lock(tmp_path, tmp_path / "p", command="dry-run"):
                pass
    assert not lock.held


def test_live_holder_in_other_process_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "projects" / "k" / "lock"
    child = _hold_in_child(path)
    try:
        with pytest.raises(LockHeldError) as info:
            FileLock(path, command="once").acquire()
        assert info.value.holder["pid"] == child.pid
        assert f"pid {child.pid}" in str(info.value)
        assert lock_is_held(path) is not None
    finally:
        child.kill()
        child.wait()
    # The kernel dropped the flock with the process: the next starter reclaims with a warning.
    with capture_logs() as logs, FileLock(path, command="once") as lock:
        assert lock.held
    reclaimed = [e for e in logs if e["event"] == "lock.reclaimed"]
    assert len(reclaimed) == 1
    assert reclaimed[0]["log_level"] == "warning"
    assert reclaimed[0]["previous"]["pid"] == child.pid


def test_stale_record_of_dead_pid_is_reclaimed(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    dead = _dead_pid()
    assert not pid_alive(dead)
    path.write_text(
        json.dumps({"pid": dead, "host": os.uname().nodename, "started_at": "x", "command": "c"})
    )
    with capture_logs() as logs, FileLock(path, command="once"):
        holder = read_holder(path)
        assert holder is not None and holder.pid == os.getpid()
    assert [e["previous"]["pid"] for e in logs if e["event"] == "lock.reclaimed"] == [dead]


def test_inherited_lock_of_dead_holder_is_broken(tmp_path: Path) -> None:
    """flock still held (a leftover child kept the fd) but the recorded holder is dead."""
    path = tmp_path / "lock"
    dead = _dead_pid()
    child = _hold_in_child(path, recorded_pid=dead)
    try:
        with capture_logs() as logs, FileLock(path, command="once") as lock:
            assert lock.held
            assert read_holder(path) is not None
        assert any(e["event"] == "lock.reclaimed" for e in logs)
    finally:
        child.kill()
        child.wait()


def test_clean_release_leaves_no_stale_warning(tmp_path: Path) -> None:
    lock = daemon_lock(tmp_path)
    with lock:
        pass
    with capture_logs() as logs, lock:
        pass
    assert not [e for e in logs if e["event"] == "lock.reclaimed"]


def test_double_acquire_on_one_object_is_a_bug(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "lock", command="x")
    with lock, pytest.raises(RuntimeError):
        lock.acquire()
