"""Single-instance locks: never two nights of one project, never two daemons on one state dir.

A lock is an OS advisory lock (``fcntl.flock``) on a small file whose content names the
holder (pid, host, start time, command) so a second starter can say who is in the way.

- The kernel drops a ``flock`` when its holder dies, so a crashed night never blocks the
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
import errno
import fcntl
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
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError, IndexError):
        state = stat.read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            return False
    return True


def lock_is_held(path: Path) -> LockHolder | None:
    """Probe without disturbing: the live holder if someone holds the lock, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = read_holder(path)
            return holder or LockHolder(pid=0, host="?", started_at="?", command="unknown")
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


@contextlib.contextmanager
def _guard(path: Path) -> Iterator[None]:
    """Serialise acquire/reclaim on one lock; held for microseconds only."""
    fd = os.open(
        path.with_name(path.name + GUARD_SUFFIX), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644
    )
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class FileLock:
    """An exclusive, non-waiting, holder-describing lock on ``path``."""

    def __init__(self, path: Path, *, command: str) -> None:
        self.path = Path(path)
        self.command = command
        self._fd: int | None = None
        self.holder: LockHolder | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> Self:
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this object")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _guard(self.path):
            fd = self._open_locked()
            me = LockHolder(
                pid=os.getpid(),
                host=socket.gethostname(),
                started_at=datetime.now(UTC).isoformat(timespec="seconds"),
                command=sanitize(self.command),
            )
            try:
                self._warn_if_stale(fd)
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(me.to_dict(), sort_keys=True).encode() + b"\n", 0)
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                raise
        self._fd = fd
        self.holder = me
        return self

    def _open_locked(self) -> int:
        """Open and flock the lock file, reclaiming it once from a dead same-host holder."""
        for attempt in range(2):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
            holder = read_holder(self.path)
            if attempt == 0 and holder is not None and self._is_dead_here(holder):
                _log.warning(
                    "lock.reclaimed",
                    path=str(self.path),
                    previous=holder.to_dict(),
                    reason="holder pid is dead but the lock was inherited; replacing the file",
                )
                self.path.unlink(missing_ok=True)
                continue
            who = holder.describe() if holder else "another process"
            raise LockHeldError(
                f"{self.path} is held by {who}",
                holder=holder.to_dict() if holder else {},
            )
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _is_dead_here(holder: LockHolder) -> bool:
        return holder.host == socket.gethostname() and not pid_alive(holder.pid)

    def _warn_if_stale(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        if not size:
            return
        previous = _parse_holder(os.pread(fd, min(size, 4096), 0))
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
        finally:
            os.close(fd)  # closing drops the flock

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
