"""Enter a private network namespace (only ``lo``) for the calling thread, and leave it again.

Used by the real-CLI tests: the fake model server and every CLI subprocess started from this
thread live in a namespace where nothing but 127.0.0.1 exists, so a stray telemetry call cannot
leave the machine. Needs CAP_SYS_ADMIN (root in CI); :func:`private_network` yields ``False`` and
changes nothing when that is not permitted.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s.fileno(), _SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | _IFF_UP, b""))


@contextmanager
def private_network() -> Iterator[tuple[bool, str]]:
    """Yield ``(entered, why)``; restores the original namespace on exit."""
    if os.environ.get("SKILLOPT_NO_NETNS"):
        yield False, "SKILLOPT_NO_NETNS is set"
        return
    try:
        tid = ctypes.CDLL(None).gettid()
        original = os.open(f"/proc/{os.getpid()}/task/{tid}/ns/net", os.O_RDONLY)
    except (OSError, AttributeError) as exc:
        yield False, f"cannot open own net namespace: {exc}"
        return
    libc = _libc()
    try:
        if libc.unshare(CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            yield False, f"unshare(CLONE_NEWNET) not permitted: {os.strerror(err)}"
            return
        try:
            _loopback_up()
            yield True, "private network namespace (lo only)"
        finally:
            if libc.setns(original, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the original namespace failed")
    finally:
        os.close(original)
