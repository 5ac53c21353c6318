"""The TCP addresses a process and its descendants listen on, read from Linux's ``/proc``.

The private local Ray instance must be reachable from this machine only (Ray's servers run
whatever code a client sends): :func:`new_listeners` is how the executor checks, after
starting it, that every server the instance opened listens on a loopback address.

1. ``/proc/net/tcp`` and ``tcp6`` name every listening socket by inode and local address.
2. ``/proc/<pid>/stat`` gives each process's parent: the tree under a root pid.
3. ``/proc/<pid>/fd`` links ``socket:[inode]``: which of those sockets each process holds.

Elsewhere (no ``/proc/net/tcp``) :func:`listeners_supported` is False and nothing is read.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Listener", "is_loopback", "listeners_supported", "new_listeners", "tree_listeners"]

_PROC = Path("/proc")
_TCP_TABLES = (_PROC / "net/tcp", _PROC / "net/tcp6")
_LISTEN = "0A"  # the kernel's TCP_LISTEN state in /proc/net/tcp


@dataclass(frozen=True)
class Listener:
    pid: int
    process: str  # the command name, as ``ss`` shows it
    address: str  # "127.0.0.1", "::", "::ffff:127.0.0.1"
    port: int
    inode: int

    def __str__(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.process} (pid {self.pid}) on {host}:{self.port}"


def listeners_supported() -> bool:
    return _TCP_TABLES[0].exists()


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _decode_address(hex_address: str) -> str:
    """The kernel prints each 32-bit word of the address in host (little-endian) order."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def _listening_sockets() -> dict[int, tuple[str, int]]:
    """inode -> (address, port) of every listening TCP socket in this network namespace."""
    sockets: dict[int, tuple[str, int]] = {}
    for table in _TCP_TABLES:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            address, port = fields[1].split(":")
            sockets[int(fields[9])] = (_decode_address(address), int(port, 16))
    return sockets


def _parents() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    return parents


def _tree(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, ()))
    return tree


def _socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    try:
        names = os.listdir(_PROC / str(pid) / "fd")
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(_PROC / str(pid) / "fd" / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def _command(pid: int) -> str:
    try:
        return (_PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return "?"


def tree_listeners(root: int | None = None) -> list[Listener]:
    """Every TCP socket ``root`` (default: this process) or a descendant listens on."""
    sockets = _listening_sockets()
    found: list[Listener] = []
    for pid in sorted(_tree(os.getpid() if root is None else root)):
        for inode in sorted(_socket_inodes(pid) & sockets.keys()):
            address, port = sockets[inode]
            found.append(Listener(pid, _command(pid), address, port, inode))
    return found


def new_listeners(before: list[Listener], root: int | None = None) -> list[Listener]:
    """The tree's listeners that were not in ``before`` (a socket is its inode)."""
    known = {listener.inode for listener in before}
    return [listener for listener in tree_listeners(root) if listener.inode not in known]
