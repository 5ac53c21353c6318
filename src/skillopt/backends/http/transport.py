"""The shared HTTP client's transport: httpx2's own, on connections that keep their socket.

Before each request is placed and after each reply is read, the connection pool asks every
idle connection whether the server has closed it (``is_readable``). The stock stream answers
by rebuilding its whole table of attributes (local and peer address, each a system call) to
reach the socket, then polls it. With the pool sized to a pool of 4 x 16 slots that was a
fifth of each model call's CPU (``bench/train.py``). Here a connection looks its socket up
once, when it is opened, and answers with the same poll; everything else is the stock
transport (its TLS context, limits and keep-alive expiry).
"""

from __future__ import annotations

import select
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

__all__ = ["SocketKeepingTransport"]


def _readable(sock: socket.socket | None) -> bool:
    """True when a read would not block: for an idle connection, the server closed it (a
    socket that is gone counts as closed, as in the stock stream)."""
    fd = sock.fileno() if sock is not None else -1
    if fd < 0:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class _SocketKeepingStream(httpcore2.AsyncNetworkStream):
    """A stock stream whose ``is_readable`` probe reads the socket it kept. (The
    ``timeout`` parameters are httpcore2's interface, forwarded as they come.)"""

    def __init__(self, inner: httpcore2.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: socket.socket | None = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore2.AsyncNetworkStream:
        tls = await self._inner.start_tls(ssl_context, server_hostname, timeout)
        return _SocketKeepingStream(tls)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return _readable(self._socket)
        return self._inner.get_extra_info(info)


class _SocketKeepingBackend(httpcore2.AsyncNetworkBackend):
    """The stock AnyIO network backend, its streams wrapped."""

    def __init__(self) -> None:
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _SocketKeepingStream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        stream = await self._inner.connect_unix_socket(path, timeout, socket_options)
        return _SocketKeepingStream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class SocketKeepingTransport(httpx2.AsyncHTTPTransport):
    """``httpx2.AsyncHTTPTransport(limits=limits)`` on :class:`_SocketKeepingBackend`."""

    def __init__(self, *, limits: httpx2.Limits) -> None:
        # The parent's __init__ would build a connection pool (and a TLS context) only for
        # it to be replaced; this is the pool it builds, with the network backend set.
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_SocketKeepingBackend(),
        )
