"""The operating system's part of a lock file, on POSIX and Windows.

:mod:`.lock` keeps a holder record in the lock file and needs four things from the OS:
take the lock without waiting, take it waiting (a guard held for microseconds), probe
whether someone holds it, and let it go; plus reading and writing the record at the
start of the file, and whether a pid is alive.

1. POSIX: ``fcntl.flock`` on the whole file (shared for a probe); the kernel drops it
   when its holder dies. ``pread``/``pwrite`` for the record; ``kill(pid, 0)`` and
   ``/proc`` for liveness.
2. Windows: ``msvcrt.locking`` on one byte far past the record (:data:`REGION`), so
   other processes can still read who holds it (a Windows byte-range lock is mandatory:
   a locked byte cannot be read); Windows lets a lock reach past the end of a file and
   drops it when its holder dies. There is no shared lock: a probe takes the lock and
   lets it go at once. ``kill(pid, 0)`` would *terminate* the process on Windows, so
   liveness asks ``OpenProcess`` / ``GetExitCodeProcess`` instead.

The standard library covers both, so no dependency is added: ``filelock`` truncates the
file it locks on every attempt (its record would be lost) and ``portalocker`` locks from
offset 0 on Windows (the record could not be read while held).

:func:`primitives` picks the branch by platform; a test passes ``msvcrt`` / ``kernel32``
stand-ins to run the Windows branch elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "OPEN_FLAGS",
    "REGION",
    "OsLock",
    "PosixLock",
    "WindowsLock",
    "primitives",
]

# Not inherited by children: a night's agent CLIs must not keep its lock alive.
OPEN_FLAGS = (
    getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOINHERIT", 0) | getattr(os, "O_BINARY", 0)
)
REGION = 1 << 30  # the byte Windows locks: far past any holder record
_STILL_ACTIVE = 259
_ERROR_ACCESS_DENIED = 5
_QUERY_LIMITED_INFORMATION = 0x1000


class OsLock(Protocol):
    def try_lock(self, fd: int) -> bool: ...
    def lock(self, fd: int) -> None: ...
    def held_elsewhere(self, fd: int) -> bool: ...
    def unlock(self, fd: int) -> None: ...
    def write_record(self, fd: int, data: bytes) -> None: ...
    def read_record(self, fd: int, size: int) -> bytes: ...
    def pid_alive(self, pid: int) -> bool: ...


class PosixLock:
    """``flock`` on the whole file."""

    def __init__(self) -> None:
        import fcntl

        self._fcntl = fcntl

    def try_lock(self, fd: int) -> bool:
        try:
            self._fcntl.flock(fd, self._fcntl.LOCK_EX | self._fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def lock(self, fd: int) -> None:
        self._fcntl.flock(fd, self._fcntl.LOCK_EX)

    def held_elsewhere(self, fd: int) -> bool:
        try:
            self._fcntl.flock(fd, self._fcntl.LOCK_SH | self._fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        self._fcntl.flock(fd, self._fcntl.LOCK_UN)
        return False

    def unlock(self, fd: int) -> None:
        self._fcntl.flock(fd, self._fcntl.LOCK_UN)

    def write_record(self, fd: int, data: bytes) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)

    def read_record(self, fd: int, size: int) -> bytes:
        return os.pread(fd, size, 0)

    def pid_alive(self, pid: int) -> bool:
        if pid <= 0:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        with contextlib.suppress(OSError, IndexError):
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z":
                return False
        return True


@dataclass
class WindowsLock:
    """``msvcrt.locking`` on the byte at :data:`REGION`; ``kernel32`` for liveness."""

    msvcrt: Any
    kernel32: Any

    def _at_region(self, fd: int, mode: int) -> None:
        os.lseek(fd, REGION, os.SEEK_SET)
        self.msvcrt.locking(fd, mode, 1)

    def try_lock(self, fd: int) -> bool:
        try:
            self._at_region(fd, self.msvcrt.LK_NBLCK)
        except OSError:
            return False
        return True

    def lock(self, fd: int) -> None:
        while True:  # LK_LOCK gives up after ten one-second tries; the guard is brief
            try:
                self._at_region(fd, self.msvcrt.LK_LOCK)
                return
            except OSError:
                continue

    def held_elsewhere(self, fd: int) -> bool:
        if not self.try_lock(fd):
            return True
        self.unlock(fd)
        return False

    def unlock(self, fd: int) -> None:
        self._at_region(fd, self.msvcrt.LK_UNLCK)

    def write_record(self, fd: int, data: bytes) -> None:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, data)

    def read_record(self, fd: int, size: int) -> bytes:
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, size)

    def pid_alive(self, pid: int) -> bool:
        if pid <= 0:
            return False
        handle = self.kernel32.open_process(_QUERY_LIMITED_INFORMATION, False, pid)
        if not handle:  # no such process, or one we may not look at (then it exists)
            return bool(self.kernel32.last_error() == _ERROR_ACCESS_DENIED)
        try:
            code: int = self.kernel32.exit_code(handle)
        finally:
            self.kernel32.close_handle(handle)
        return bool(code == _STILL_ACTIVE)


class _Kernel32:
    """The few ``kernel32`` calls liveness needs, through ctypes (Windows only)."""

    def __init__(self) -> None:
        import ctypes
        from ctypes import wintypes

        self._ctypes = ctypes
        self._dll = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
        self._dll.OpenProcess.restype = wintypes.HANDLE
        self._dword = wintypes.DWORD

    def open_process(self, access: int, inherit: bool, pid: int) -> Any:
        return self._dll.OpenProcess(access, inherit, pid)

    def last_error(self) -> int:
        return int(self._ctypes.get_last_error())  # type: ignore[attr-defined]

    def exit_code(self, handle: Any) -> int:
        code = self._dword()
        if not self._dll.GetExitCodeProcess(handle, self._ctypes.byref(code)):
            return _STILL_ACTIVE  # cannot tell: do not call it dead
        return int(code.value)

    def close_handle(self, handle: Any) -> None:
        self._dll.CloseHandle(handle)


def primitives(platform: str | None = None) -> OsLock:
    """The lock primitives of ``platform`` (default: this machine's)."""
    if (platform or sys.platform).startswith("win"):
        import msvcrt

        return WindowsLock(msvcrt=msvcrt, kernel32=_Kernel32())
    return PosixLock()
