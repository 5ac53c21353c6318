"""The MCP server's stdio wire: every line that is not a JSON-RPC message gets its error reply.

The SDK's stdio transport hands a line it cannot decode to the server as an exception, and the
server drops it: the client that sent it waits for ever. Here such a line is answered as
JSON-RPC 2.0 says: ``-32700`` (parse error) for a line that is not JSON, ``-32600`` (invalid
request) for JSON that is not a message (with the request's ``id`` when it has one).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self

from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError

from skillopt.logging import get_logger

__all__ = ["serve_stdio", "wire_error"]

_log = get_logger(__name__)
_Item = SessionMessage | Exception


def wire_error(exc: Exception) -> JSONRPCError:
    """The reply to a line the transport could not decode (``exc`` says why)."""
    if isinstance(exc, ValidationError):
        errors = exc.errors()
        if not any(e.get("type") == "json_invalid" for e in errors):
            return JSONRPCError(
                jsonrpc="2.0",
                id=_request_id(errors),
                error=ErrorData(
                    code=INVALID_REQUEST, message="Invalid Request: not a JSON-RPC 2.0 message"
                ),
            )
    return JSONRPCError(
        jsonrpc="2.0", id=None, error=ErrorData(code=PARSE_ERROR, message="Parse error: not JSON")
    )


def _request_id(errors: list[Any]) -> str | int | None:
    for error in errors:
        given = error.get("input")
        if isinstance(given, dict):
            found = given.get("id")
            if isinstance(found, str | int) and not isinstance(found, bool):
                return found
    return None


class _Answering:
    """The transport's read stream with its undecodable lines answered instead of passed on."""

    def __init__(self, inner: ReadStream[_Item], replies: WriteStream[SessionMessage]) -> None:
        self._inner = inner
        self._replies = replies

    async def receive(self) -> _Item:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            await self._answer(item)

    async def __anext__(self) -> _Item:
        while True:
            item = await self._inner.__anext__()  # StopAsyncIteration at the end of input
            if not isinstance(item, Exception):
                return item
            await self._answer(item)

    async def _answer(self, exc: Exception) -> None:
        reply = wire_error(exc)
        _log.warning("mcp.bad_line", code=reply.error.code, reason=type(exc).__name__)
        await self._replies.send(SessionMessage(reply))

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


async def serve_stdio(server: MCPServer[Any]) -> None:
    """``server.run_stdio_async()``, with undecodable lines answered."""
    lowlevel = server._lowlevel_server  # as the SDK's own run_stdio_async does
    async with stdio_server() as (read_stream, write_stream):
        await lowlevel.run(
            _Answering(read_stream, write_stream),
            write_stream,
            lowlevel.create_initialization_options(),
        )
