"""Stand-ins for the Windows pieces :mod:`skillopt_sleep.oslock` uses, so its Windows
branch runs on Linux: ``msvcrt.locking`` as real POSIX byte-range locks (``lockf``: a
range one process locks is refused to another, as a Windows byte-range lock is; unlike
Windows, two descriptors of one process do not exclude each other, and closing any of them
drops the process's locks on the file), and the ``kernel32``
liveness calls answered from this machine's process table."""

from __future__ import annotations

import errno
import fcntl
import os
from typing import Any

from skillopt_sleep.oslock import WindowsLock


class FakeMsvcrt:
    LK_UNLCK, LK_LOCK, LK_NBLCK = 0, 1, 2

    def locking(self, fd: int, mode: int, nbytes: int) -> None:
        start = os.lseek(fd, 0, os.SEEK_CUR)
        if mode == self.LK_UNLCK:
            fcntl.lockf(fd, fcntl.LOCK_UN, nbytes, start, os.SEEK_SET)
            return
        # POSIX refuses a write lock on a read-only descriptor; Windows locks through any
        # handle. A shared lock conflicts with another process's lock just the same.
        read_only = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
        flags = (fcntl.LOCK_SH if read_only else fcntl.LOCK_EX) | (
            fcntl.LOCK_NB if mode == self.LK_NBLCK else 0
        )
        try:
            fcntl.lockf(fd, flags, nbytes, start, os.SEEK_SET)
        except BlockingIOError as exc:  # msvcrt says EACCES / EDEADLOCK
            raise PermissionError(errno.EACCES, "locked") from exc


class FakeKernel32:
    """``OpenProcess`` succeeds for a live pid of ours, is denied for ``denied`` pids."""

    def __init__(self, denied: frozenset[int] = frozenset()) -> None:
        self.denied = denied
        self._error = 0
        self.open_handles: set[int] = set()

    def open_process(self, access: int, inherit: bool, pid: int) -> Any:
        if pid in self.denied:
            self._error = 5  # ERROR_ACCESS_DENIED
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            self._error = 87  # ERROR_INVALID_PARAMETER: no such process
            return None
        self.open_handles.add(pid)
        return pid

    def last_error(self) -> int:
        return self._error

    def exit_code(self, handle: Any) -> int:
        with open(f"/proc/{handle}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
        return 0 if state == "Z" else 259  # STILL_ACTIVE

    def close_handle(self, handle: Any) -> None:
        self.open_handles.discard(handle)


def windows_lock(kernel32: FakeKernel32 | None = None) -> WindowsLock:
    return WindowsLock(msvcrt=FakeMsvcrt(), kernel32=kernel32 or FakeKernel32())
