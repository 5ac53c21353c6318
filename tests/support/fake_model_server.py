"""A scriptable fake model server on 127.0.0.1 speaking the OpenAI and Azure OpenAI routes.

Routes (any path prefix before ``v1``/``openai`` is allowed and names a *member*, so one
server can stand in for many endpoints: ``http://127.0.0.1:PORT/m1/v1`` is member ``m1``):

=====================  ==================================================================
``chat``               ``POST {prefix}/v1/chat/completions`` (``stream`` must be false)
``responses``          ``POST {prefix}/v1/responses``
``azure_chat``         ``POST {prefix}/openai/deployments/{d}/chat/completions?api-version=``
``azure_responses``    ``POST {prefix}/openai/responses?api-version=`` (and ``/openai/v1/...``)
``GET /_stats``        JSON: per member+route counts, in-flight now, peak in-flight
=====================  ==================================================================

Behaviour per request comes from, in order: the member's scripted queue
(:meth:`FakeModelServer.script`), the ``rule`` callable, then the default :class:`Reply`
(echo of the last user message after ``latency`` seconds, usage numbers included).
A :class:`Reply` can add latency, return any status with ``Retry-After`` /
``retry-after-ms`` headers, hang past a client timeout, drop the connection, send
malformed JSON, empty content or any raw body (an HTML page), and set usage numbers
(cached prompt tokens included, as OpenAI reports them).

Every request is recorded (:attr:`FakeModelServer.requests`) with its parsed body and
headers so tests can assert what was (not) sent. In-flight requests are counted per
member and route; a client that disconnects ends its request at once (counted in
``disconnects``), so cancellation is observable at the server.

Use in-process (a background thread with its own event loop)::

    with FakeModelServer() as server:
        base = server.url("m1")          # -> http://127.0.0.1:PORT/m1/v1

or as a separate process (benchmarks; its CPU is not counted as ours)::

    python tests/support/fake_model_server.py --latency 0.2 --error-rate 0.1
    # prints "PORT <n>" on stdout, serves until killed

Other modules may add routes with :meth:`FakeModelServer.add_route`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

HOST = "127.0.0.1"


@dataclass(frozen=True, kw_only=True)
class Reply:
    """What the server does with one request. Defaults: an echo, 200, no delay."""

    status: int = 200
    text: str | None = None  # None: the reply function decides (echo by default)
    latency: float | None = None  # None: the server default
    headers: dict[str, str] = field(default_factory=dict)
    usage: tuple[int, int] | None = (11, 7)  # (prompt, completion); None: omit usage
    cached_tokens: int | None = None  # prompt tokens the provider served from its prompt cache
    finish_reason: str = "stop"
    hang: bool = False  # never answer; the request ends when the client goes away
    drop: bool = False  # close the connection without any response
    malformed: bool = False  # 200 with a body that is not JSON
    error_code: str | None = None  # error.code in a non-2xx body ("content_filter", ...)
    body: dict[str, Any] | None = None  # send exactly this JSON body
    raw: bytes | None = None  # send exactly these bytes, as ``content_type``
    content_type: str = "application/json"
    chunked: bool = False  # no content-length: the body comes in 64 KiB chunks
    content_encoding: str | None = None  # a content-encoding header (the body is not encoded)


@dataclass(frozen=True, kw_only=True)
class Request:
    """One received request, as recorded."""

    member: str
    route: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    raw_body: bytes
    arrived: float  # time.monotonic() at arrival
    peer: str = ""  # client "host:port": one keep-alive connection keeps one peer
    received: float = 0.0  # time.time() at arrival, to compare with another process's logs

    @property
    def user_text(self) -> str:
        """The last user message (chat) or input text (responses)."""
        body = self.body if isinstance(self.body, dict) else {}
        items = body.get("messages") or body.get("input") or []
        if isinstance(items, str):
            return items
        for item in reversed(items):
            if isinstance(item, dict) and item.get("role") == "user":
                content = item.get("content")
                if isinstance(content, str):
                    return content
                if isinstance(content, list):
                    return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return ""


Handler = Callable[["Connection", Request], Awaitable[None]]
Rule = Callable[[Request], Reply | None]

_MODEL_ROUTES: list[tuple[str, re.Pattern[str]]] = [
    ("chat", re.compile(r"^(?P<prefix>.*?)/v1/chat/completions$")),
    ("responses", re.compile(r"^(?P<prefix>.*?)/(?:openai/)?v1/responses$")),
    (
        "azure_chat",
        re.compile(r"^(?P<prefix>.*?)/openai/deployments/(?P<dep>[^/]+)/chat/completions$"),
    ),
    ("azure_responses", re.compile(r"^(?P<prefix>.*?)/openai/responses$")),
]


def echo(request: Request) -> str:
    """The default reply text."""
    return f"echo: {request.user_text}"


class Connection:
    """One accepted connection (keep-alive: many requests in turn).

    Route handlers answer through :meth:`send` / :meth:`send_json`, or write raw bytes to
    ``writer`` (for example a server-sent-events stream) and close it when done.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        host, port = writer.get_extra_info("peername")[:2]
        self.peer = f"{host}:{port}"

    async def send(
        self,
        status: int,
        body: bytes,
        headers: dict[str, str] | None = None,
        *,
        chunked: bool = False,
    ) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Status")
        length = "transfer-encoding: chunked" if chunked else f"content-length: {len(body)}"
        head = [f"HTTP/1.1 {status} {reason}", length]
        hdrs = {"content-type": "application/json", **(headers or {})}
        head += [f"{k}: {v}" for k, v in hdrs.items()]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        if not chunked:
            self.writer.write(body)
            await self.writer.drain()
            return
        for start in range(0, len(body), 65536):
            part = body[start : start + 65536]
            self.writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            await self.writer.drain()
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()

    async def send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        await self.send(status, json.dumps(obj).encode(), headers)

    async def wait_or_disconnect(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if the client closed the connection first."""
        try:
            data = await asyncio.wait_for(self.reader.read(1), timeout=seconds)
        except TimeoutError:
            return False
        return data == b""


class FakeModelServer:
    """The server. Thread-safe scripting; see the module docstring."""

    def __init__(
        self,
        *,
        latency: float = 0.0,
        reply_fn: Callable[[Request], str] = echo,
        rule: Rule | None = None,
        port: int = 0,
        hang_seconds: float = 60.0,
        record_bodies: bool = True,
    ) -> None:
        self.latency = latency
        self.reply_fn = reply_fn
        self.rule = rule
        self.hang_seconds = hang_seconds
        self.record_bodies = record_bodies
        self._port = port
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = [
            (name, pattern, self._model_route) for name, pattern in _MODEL_ROUTES
        ]
        self.requests: list[Request] = []
        self.count: dict[tuple[str, str], int] = defaultdict(int)
        self.in_flight: dict[tuple[str, str], int] = defaultdict(int)
        self.peak: dict[tuple[str, str], int] = defaultdict(int)
        self.disconnects = 0
        self.open_connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    # ------------------------------------------------------------------ scripting
    def script(self, member: str, *replies: Reply) -> None:
        """Queue replies for the next requests to ``member`` (the path prefix, "" for none)."""
        with self._lock:
            self._scripts[_norm(member)].extend(replies)

    def add_route(self, name: str, path_regex: str, handler: Handler) -> None:
        """Serve paths matching ``path_regex``; its ``prefix`` group names the member."""
        with self._lock:
            self._routes.insert(0, (name, re.compile(path_regex), handler))

    # ------------------------------------------------------------------ inspection
    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    def url(self, member: str = "") -> str:
        """OpenAI-style base URL for a member (``.../member/v1``)."""
        prefix = f"/{_norm(member)}" if member else ""
        return f"{self.base}{prefix}/v1"

    def azure_endpoint(self, member: str = "") -> str:
        prefix = f"/{_norm(member)}" if member else ""
        return f"{self.base}{prefix}"

    def requests_for(self, member: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.member == _norm(member)]

    def total(self, member: str) -> int:
        with self._lock:
            return sum(n for (m, _), n in self.count.items() if m == _norm(member))

    def peak_for(self, member: str) -> int:
        with self._lock:
            return max((n for (m, _), n in self.peak.items() if m == _norm(member)), default=0)

    def now_in_flight(self) -> int:
        with self._lock:
            return sum(self.in_flight.values())

    def wait_until(self, predicate: Callable[[FakeModelServer], bool], timeout: float) -> bool:
        """Block (call via ``anyio.to_thread.run_sync``) until ``predicate(self)`` holds.

        The predicate runs with the server lock held, so it must read attributes directly
        (``s.disconnects``, ``s.in_flight``), not call the locking helpers.
        """
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            keys = sorted(set(self.count) | set(self.peak))
            return {
                "routes": [
                    {
                        "member": m,
                        "route": r,
                        "count": self.count[(m, r)],
                        "in_flight": self.in_flight[(m, r)],
                        "peak": self.peak[(m, r)],
                    }
                    for m, r in keys
                ],
                "disconnects": self.disconnects,
            }

    # ------------------------------------------------------------------ lifecycle
    async def serve(self) -> None:
        """Start listening on the running loop (used by the thread and by process mode)."""
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._client, HOST, self._port, backlog=1024)

    def start(self) -> FakeModelServer:
        """Run the server in a daemon thread with its own event loop."""

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self.serve())
            self._ready.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-model-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake model server did not start")
        return self

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ HTTP
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(reader, writer)
        with self._lock:
            self.open_connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                length = int(headers.get("content-length", "0") or 0)
                raw = await reader.readexactly(length) if length else b""
                keep = await self._dispatch(conn, method, target, headers, raw)
                if not keep or headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
            with self._lock:
                self.open_connections -= 1
                self._changed.notify_all()

    async def _dispatch(
        self, conn: Connection, method: str, target: str, headers: dict[str, str], raw: bytes
    ) -> bool:
        parts = urlsplit(target)
        path = parts.path.rstrip("/")
        if method == "GET" and path == "/_stats":
            await conn.send_json(200, self.stats())
            return True
        with self._lock:
            routes = list(self._routes)
        for name, pattern, handler in routes:
            match = pattern.match(path)
            if match is None:
                continue
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = None
            request = Request(
                member=_norm(match.groupdict().get("prefix") or ""),
                route=name,
                path=path,
                query=parse_qs(parts.query),
                headers=headers,
                body=body if self.record_bodies else None,
                raw_body=raw if self.record_bodies else b"",
                arrived=time.monotonic(),
                peer=conn.peer,
                received=time.time(),
            )
            key = (request.member, name)
            with self._lock:
                if self.record_bodies:
                    self.requests.append(request)
                self.count[key] += 1
                self.in_flight[key] += 1
                self.peak[key] = max(self.peak[key], self.in_flight[key])
                self._changed.notify_all()
            try:
                await handler(conn, request)
            except _Dropped:
                return False
            finally:
                with self._lock:
                    self.in_flight[key] -= 1
                    self._changed.notify_all()
            return True
        await conn.send_json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
        return True

    def _next_reply(self, request: Request) -> Reply:
        with self._lock:
            queue = self._scripts.get(request.member)
            if queue:
                return queue.popleft()
        if self.rule is not None:
            chosen = self.rule(request)
            if chosen is not None:
                return chosen
        return Reply()

    async def _model_route(self, conn: Connection, request: Request) -> None:
        reply = self._next_reply(request)
        if isinstance(request.body, dict) and request.body.get("stream"):
            await conn.send_json(400, _error("streaming is not supported here", "invalid_request"))
            return
        delay = self.latency if reply.latency is None else reply.latency
        if reply.hang:
            delay = max(delay, self.hang_seconds)
        if delay > 0 and await conn.wait_or_disconnect(delay):
            with self._lock:
                self.disconnects += 1
                self._changed.notify_all()
            raise _Dropped
        if reply.drop:
            conn.writer.transport.abort()
            raise _Dropped
        if reply.malformed:
            await conn.send(reply.status, b'{"id": "broken", "choices": [', reply.headers)
            return
        if reply.raw is not None:
            headers = {"content-type": reply.content_type, **reply.headers}
            await conn.send(reply.status, reply.raw, headers)
            return
        if reply.body is not None:
            await conn.send_json(reply.status, reply.body, reply.headers)
            return
        if reply.status >= 400:
            err = _error(f"scripted status {reply.status}", "scripted", reply.error_code)
            await conn.send_json(reply.status, err, reply.headers)
            return
        text = self.reply_fn(request) if reply.text is None else reply.text
        model = str((request.body or {}).get("model", "fake-model"))
        if request.route in ("chat", "azure_chat"):
            payload = _chat_body(model, text, reply)
        else:
            payload = _responses_body(model, text, reply)
        headers = dict(reply.headers)
        if reply.content_encoding:
            headers["content-encoding"] = reply.content_encoding
        body = json.dumps(payload).encode()
        await conn.send(reply.status, body, headers, chunked=reply.chunked)


class _Dropped(Exception):
    """The connection is gone (dropped on purpose or by the client)."""


def _norm(member: str) -> str:
    return member.strip("/")


def _error(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code, "param": None}}


def _chat_body(model: str, text: str, reply: Reply) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": reply.finish_reason,
            }
        ],
    }
    if reply.usage is not None:
        p, c = reply.usage
        body["usage"] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
        if reply.cached_tokens is not None:
            body["usage"]["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
    return body


def _responses_body(model: str, text: str, reply: Reply) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "resp_fake",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": [
            {
                "type": "message",
                "id": "msg_fake",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    if reply.usage is not None:
        p, c = reply.usage
        body["usage"] = {
            "input_tokens": p,
            "output_tokens": c,
            "total_tokens": p + c,
            "input_tokens_details": {"cached_tokens": reply.cached_tokens or 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
    return body


def error_rate_rule(
    rate: float, *, seed: int = 0, status: int = 503, latency: float | None = None
) -> Rule:
    """A rule answering ``status`` to a random ``rate`` share of requests.

    ``latency`` is how long an error takes (``None``: the server default, like a success).
    """
    rng = random.Random(seed)
    lock = threading.Lock()

    def rule(_: Request) -> Reply | None:
        with lock:
            hit = rng.random() < rate
        return Reply(status=status, latency=latency) if hit else None

    return rule


@contextlib.contextmanager
def child_server(*args: str) -> Iterator[str]:
    """The server in a child process (its memory and CPU are not the test's); yields the
    OpenAI-style base URL. ``args`` are the process-mode flags (``--reply-bytes``, ...)."""
    proc = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"fake model server did not start: {line!r}")
        yield f"http://{HOST}:{int(line.split()[1])}/v1"
    finally:
        proc.terminate()
        proc.wait(30)


def main(argv: list[str] | None = None) -> None:
    """Process mode: serve until killed; prints ``PORT <n>`` once listening."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--error-rate", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--error-latency", type=float, default=None, help="seconds before an error reply"
    )
    parser.add_argument("--reply-bytes", type=int, default=0, help="answer with this much text")
    parser.add_argument("--chunked", action="store_true", help="send no content-length")
    args = parser.parse_args(argv)
    errors = (
        error_rate_rule(args.error_rate, seed=args.seed, latency=args.error_latency)
        if args.error_rate
        else None
    )
    chunked = Reply(chunked=True)

    def rule(request: Request) -> Reply | None:
        scripted = errors(request) if errors is not None else None
        return scripted or (chunked if args.chunked else None)

    size = args.reply_bytes
    server = FakeModelServer(
        latency=args.latency,
        port=args.port,
        rule=rule,
        reply_fn=(lambda _: "x" * size) if size else echo,
        record_bodies=False,
    )

    async def run() -> None:
        await server.serve()
        sys.stdout.write(f"PORT {server.port}\n")
        sys.stdout.flush()
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


if __name__ == "__main__":
    main()
