"""The shared client's transport: keep-alive reuse, and a connection the server closed while
idle is noticed (by the probe on the kept socket) instead of being sent on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx2
import pytest

from skillopt.backends.http.member import make_http_client
from skillopt.backends.http.transport import SocketKeepingTransport

_REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


class _Server:
    """A loopback HTTP/1.1 server that answers "ok"; ``close_after_reply`` makes it close
    the connection once it answered (an idle timeout on the server's side)."""

    def __init__(self) -> None:
        self.connections = 0
        self.close_after_reply = False
        self.closed = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(_REPLY)
                await writer.drain()
                if self.close_after_reply:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()
        await writer.wait_closed()
        self.closed.set()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/"


@pytest.fixture
async def server() -> AsyncIterator[_Server]:
    srv = _Server()
    srv.server = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
    async with srv.server:
        yield srv


async def test_the_shared_client_uses_it_and_reuses_an_idle_connection(server: _Server) -> None:
    client = make_http_client(max_connections=4)
    assert isinstance(client._transport, SocketKeepingTransport)
    async with client:
        for _ in range(3):
            assert (await client.get(server.url)).text == "ok"
    assert server.connections == 1


async def test_a_connection_the_server_closed_while_idle_is_not_sent_on(server: _Server) -> None:
    limits = httpx2.Limits(max_connections=4, max_keepalive_connections=4)
    async with httpx2.AsyncClient(transport=SocketKeepingTransport(limits=limits)) as client:
        server.close_after_reply = True
        assert (await client.get(server.url)).text == "ok"
        await server.closed.wait()  # the server's side of the kept-alive connection is gone
        server.close_after_reply = False
        assert (await client.get(server.url)).text == "ok"  # on a new connection, no error
    assert server.connections == 2
