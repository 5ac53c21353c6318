"""Stop reading an HTTP reply at its byte cap (see :mod:`skillopt.backends.reply_cap`).

HTTP members read through one shared client: :func:`reply_cap` sets the cap for the calls
made inside it (a context variable, so concurrent calls each keep their own), and the
client's response hook, :func:`cap_response`, wraps each body so that reading past the cap
raises :class:`~skillopt.errors.ReplyTooLargeError` (a declared
``Content-Length`` over the cap fails before any of the body is read). Replies are
requested uncompressed (``Accept-Encoding: identity``) so the bytes counted are the bytes
held; a compressed reply is refused rather than inflated.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import httpx2

from skillopt.errors import ReplyTooLargeError, RetryableBackendError

__all__ = ["REQUEST_HEADERS", "UNSCOPED_CAP", "cap_response", "reply_cap"]

UNSCOPED_CAP = 8 * 1024 * 1024  # a read through the shared client outside reply_cap()
REQUEST_HEADERS = {"Accept-Encoding": "identity"}

_cap: ContextVar[int] = ContextVar("skillopt_reply_cap", default=UNSCOPED_CAP)


@contextmanager
def reply_cap(limit: int) -> Iterator[None]:
    """Replies read through the shared client inside this block stop at ``limit`` bytes."""
    token = _cap.set(limit)
    try:
        yield
    finally:
        _cap.reset(token)


class _CappedStream(httpx2.AsyncByteStream):
    """A response body that raises once more than ``cap`` bytes came in."""

    def __init__(self, inner: httpx2.AsyncByteStream, cap: int) -> None:
        self._inner = inner
        self._cap = cap

    @property
    def elapsed(self) -> Any:
        return getattr(self._inner, "elapsed", None)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._cap:
                raise ReplyTooLargeError(self._cap, seen=seen)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


async def cap_response(response: httpx2.Response) -> None:
    """Response hook of the shared client: refuse or wrap the body per the current cap."""
    cap = _cap.get()
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        await response.aclose()
        raise RetryableBackendError(
            "compressed reply",
            kind="too_large",
            status=response.status_code,
            cause=f"the endpoint sent a {encoding}-encoded reply although identity was "
            "asked; compressed replies are refused because their size cannot be capped",
        )
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        await response.aclose()
        raise ReplyTooLargeError(cap, seen=int(declared))
    assert isinstance(response.stream, httpx2.AsyncByteStream)
    response.stream = _CappedStream(response.stream, cap)
