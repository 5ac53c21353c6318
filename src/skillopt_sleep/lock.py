"""Single-instance locks: never two nights of one project, never two daemons on one state dir.

A lock is an OS lock (``flock`` on POSIX, a byte-range lock on Windows: :mod:`.oslock`) on
a small file whose content names the holder (pid, host, start time, command) so a second
starter can say who is in the way.

- The OS drops the lock when its holder dies, so a crashed night never blocks the
  next one; its leftover holder record is reported as reclaimed with a warning.
- If the lock is still held but the recorded holder pid is dead on this host (a forked
  child kept the descriptor open), the file is replaced and the lock reclaimed.
- Acquisition, holder writes and reclaims are serialised by a short-lived guard lock
  beside the lock file, so two starters can never both win.
- On a clean release the holder record is truncated, so an empty file means "free".

Use it as a sync or async context manager; acquisition never waits, it succeeds or raises
:class:`~skillopt.errors.LockHeldError`.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Self

from skillopt.errors import LockHeldError
from skillopt.logging import get_logger
from skillopt.redact import sanitize
from skillopt_sleep.oslock import OPEN_FLAGS, OsLock, primitives
from skillopt_sleep.state import project_key as project_key  # re-exported

__all__ = [
    "GUARD_SUFFIX",
    "LOCK_NAME",
    "FileLock",
    "LockHolder",
    "daemon_lock",
    "daemon_lock_path",
    "lock_is_held",
    "pid_alive",
    "project_key",
    "project_lock",
    "project_lock_path",
    "read_holder",
]


_log = get_logger(__name__)
_OS = primitives()


LOCK_NAME = "lock"
GUARD_SUFFIX = ".guard"


def project_lock_path(state_dir: Path, key: str) -> Path:
    """``<state_dir>/projects/<key>/lock``."""
    return Path(state_dir) / "projects" / key / LOCK_NAME


def daemon_lock_path(state_dir: Path) -> Path:
    """One daemon per state directory."""
    return Path(state_dir) / "daemon.lock"


@dataclass(frozen=True, kw_only=True)
class LockHolder:
    """Who holds (or last held) a lock."""

    pid: int
    host: str
    started_at: str
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} ({self.command}) since {self.started_at}"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _parse_holder(raw: bytes) -> LockHolder | None:
    try:
        data = json.loads(raw.decode("utf-8"))
        return LockHolder(
            pid=int(data["pid"]),
            host=str(data["host"]),
            started_at=str(data["started_at"]),
            command=str(data["command"]),
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def read_holder(path: Path) -> LockHolder | None:
    """The holder record in a lock file, or None if free, absent or unreadable."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return None
    return _parse_holder(raw) if raw.strip() else None


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists on this host (zombies count as dead)."""
    return _OS.pid_alive(pid)


def lock_is_held(path: Path, *, os_lock: OsLock | None = None) -> LockHolder | None:
    """Probe without disturbing: the live holder if someone holds the lock, else None."""
    primitive = os_lock or _OS
    try:
        fd = os.open(path, os.O_RDONLY | OPEN_FLAGS)
    except OSError:
        return None
    try:
        if not primitive.held_elsewhere(fd):
            return None
        holder = read_holder(path)
        return holder or LockHolder(pid=0, host="?", started_at="?", command="unknown")
    finally:
        os.close(fd)


@contextlib.contextmanager
def _guard(path: Path, primitive: OsLock) -> Iterator[None]:
    """Serialise acquire/reclaim on one lock; held for microseconds only."""
    fd = os.open(
        path.with_name(path.name + GUARD_SUFFIX), os.O_RDWR | os.O_CREAT | OPEN_FLAGS, 0o644
    )
    try:
        primitive.lock(fd)
        yield
    finally:
        os.close(fd)


class FileLock:
    """An exclusive, non-waiting, holder-describing lock on ``path``."""

    def __init__(self, path: Path, *, command: str, os_lock: OsLock | None = None) -> None:
        self.path = Path(path)
        self.command = command
        self._os = os_lock or _OS
        self._fd: int | None = None
        self.holder: LockHolder | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> Self:
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this object")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _guard(self.path, self._os):
            fd = self._open_locked()
            me = LockHolder(
                pid=os.getpid(),
                host=socket.gethostname(),
                started_at=datetime.now(UTC).isoformat(timespec="seconds"),
                command=sanitize(self.command),
            )
            try:
                self._warn_if_stale(fd)
                self._os.write_record(fd, json.dumps(me.to_dict(), sort_keys=True).encode() + b"\n")
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                raise
        self._fd = fd
        self.holder = me
        return self

    def _open_locked(self) -> int:
        """Open and lock the lock file, reclaiming it once from a dead same-host holder."""
        for attempt in range(2):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | OPEN_FLAGS, 0o644)
            if self._os.try_lock(fd):
                return fd
            os.close(fd)
            holder = read_holder(self.path)
            if attempt == 0 and holder is not None and self._is_dead_here(holder):
                _log.warning(
                    "lock.reclaimed",
                    path=str(self.path),
                    previous=holder.to_dict(),
                    reason="holder pid is dead but the lock was inherited; replacing the file",
                )
                with contextlib.suppress(PermissionError):  # Windows: the file is still open
                    self.path.unlink(missing_ok=True)
                continue
            who = holder.describe() if holder else "another process"
            raise LockHeldError(
                f"{self.path} is held by {who}",
                holder=holder.to_dict() if holder else {},
            )
        raise AssertionError("unreachable")  # pragma: no cover

    def _is_dead_here(self, holder: LockHolder) -> bool:
        return holder.host == socket.gethostname() and not self._os.pid_alive(holder.pid)

    def _warn_if_stale(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        if not size:
            return
        previous = _parse_holder(self._os.read_record(fd, min(size, 4096)))
        _log.warning(
            "lock.reclaimed",
            path=str(self.path),
            previous=previous.to_dict() if previous else None,
            reason="holder exited without releasing (crash or kill)",
        )

    def release(self) -> None:
        fd, self._fd = self._fd, None
        self.holder = None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
            with contextlib.suppress(OSError):
                self._os.unlock(fd)
        finally:
            os.close(fd)  # closing drops the lock too

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    async def __aenter__(self) -> Self:
        return self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def project_lock(state_dir: Path, project: Path, *, command: str | None = None) -> FileLock:
    """The lock every night of ``project`` takes (``once``, ``dry-run``, daemon nights)."""
    cmd = command or " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:200]
    return FileLock(project_lock_path(state_dir, project_key(project)), command=cmd)


def daemon_lock(state_dir: Path) -> FileLock:
    return FileLock(daemon_lock_path(state_dir), command="daemon")
