"""A scriptable fake model server for driving the real agent CLIs on 127.0.0.1.

It speaks just enough of three wire formats for codex, Claude Code and Copilot CLI:

* ``POST /v1/responses``          OpenAI Responses, SSE when ``stream`` is true (codex, copilot)
* ``POST /v1/messages``           Anthropic Messages, SSE when ``stream`` is true (claude)
* ``POST /v1/chat/completions``   OpenAI Chat Completions, streamed or not (copilot)

Behaviour is set server-wide through :class:`Script` or per request by directives in the prompt
text (so concurrent calls can behave differently):

* ``FAKE_REPLY[text]``   reply with ``text`` (default reply: ``ANSWER:ok``)
* ``FAKE_ERROR:NNN``     answer with HTTP status NNN and a JSON error body
* ``FAKE_SLEEP:MS``      wait MS milliseconds before answering
* ``FAKE_HANG``          never answer (until the server stops)
* ``FAKE_TOOL[cmd]``     first ask the agent to run shell command ``cmd`` (codex ``exec_command``,
                         Claude ``Bash``, Copilot ``bash``); once the request carries the
                         tool result, reply
* ``FAKE_SKILL[name]``   first ask the agent to load skill ``name`` with its skill tool (Claude
                         ``Skill``, Copilot ``skill``); once the request carries the result, reply

In a multi-turn conversation the request carries every earlier turn: the last ``FAKE_REPLY``
(the newest turn's) wins.

It counts requests and in-flight requests (``max_in_flight`` is what concurrency tests check).
The server runs in a daemon thread so a sync fixture can own it across async tests.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_REPLY = re.compile(r"FAKE_REPLY\[([^\]]*)\]")
_ERROR = re.compile(r"FAKE_ERROR:(\d{3})")
_SLEEP = re.compile(r"FAKE_SLEEP:(\d+)")
_TOOL = re.compile(r"FAKE_TOOL\[([^\]]*)\]")
_SKILL = re.compile(r"FAKE_SKILL\[([^\]]*)\]")


@dataclass
class Script:
    """Server-wide behaviour; prompt directives take precedence."""

    reply: str = "ANSWER:ok"
    latency: float = 0.0  # seconds before the response starts
    status: int | None = None  # force this HTTP error status on every request
    hang: bool = False


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0
    max_in_flight: int = 0
    requests: list[Seen] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


class FakeAgentServer:
    """Start with :meth:`start` (or as a context manager); ``base_url`` has no ``/v1``."""

    def __init__(self, script: Script | None = None, host: str = "127.0.0.1") -> None:
        self.script = script or Script()
        self._state = _State()
        self._host = host
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeAgentServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer((self._host, 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._state.stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeAgentServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- observation -------------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._httpd is not None
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def requests(self) -> list[Seen]:
        with self._state.lock:
            return list(self._state.requests)

    @property
    def max_in_flight(self) -> int:
        with self._state.lock:
            return self._state.max_in_flight

    @property
    def in_flight(self) -> int:
        with self._state.lock:
            return self._state.in_flight

    def reset(self) -> None:
        with self._state.lock:
            self._state.requests.clear()
            self._state.max_in_flight = self._state.in_flight


def dead_port() -> int:
    """A loopback port with nothing listening (bound then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _strings(value: Any) -> list[str]:
    """Every string leaf of a JSON value (prompt text, unescaped)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _has_item(value: Any, item_type: str) -> bool:
    """True when a list of input items / messages contains an item (or block) of this type."""
    if isinstance(value, dict):
        return value.get("type") == item_type or _has_item(value.get("content"), item_type)
    if isinstance(value, list):
        return any(_has_item(v, item_type) for v in value)
    return False


def _claude_call(raw: str) -> tuple[str, dict[str, Any]] | None:
    """The tool call a directive asks Claude Code for (``Bash`` or ``Skill``), if any."""
    if skill := _SKILL.search(raw):
        return "Skill", {"skill": skill.group(1)}
    if tool := _TOOL.search(raw):
        return "Bash", {"command": tool.group(1)}
    return None


def _chat_call(raw: str) -> tuple[str, dict[str, Any]] | None:
    """The tool call a directive asks Copilot for (``bash`` or ``skill``), if any."""
    if skill := _SKILL.search(raw):
        return "skill", {"skill": skill.group(1)}
    if tool := _TOOL.search(raw):
        return "bash", {"command": tool.group(1), "description": "run a tool"}
    return None


def _sse(event: str, data: dict[str, Any]) -> bytes:
    payload = dict(data)
    payload.setdefault("type", event)
    return f"event: {event}\ndata: {json.dumps(payload)}\n\n".encode()


class _Handler(BaseHTTPRequestHandler):
    owner: FakeAgentServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr noise
        return

    def do_GET(self) -> None:
        self._send_json(404, {"error": {"message": "not found", "type": "not_found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        try:
            body = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            body = {}
        state = self.owner._state
        with state.lock:
            state.requests.append(
                Seen(
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                )
            )
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            self._answer(raw, body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with state.lock:
                state.in_flight -= 1

    # -- behaviour ---------------------------------------------------------------------------
    def _answer(self, raw: str, body: dict[str, Any]) -> None:
        raw = "\n".join(_strings(body)) if body else raw  # directives as the model would see them
        script = self.owner.script
        stop = self.owner._state.stop
        latency = script.latency
        if m := _SLEEP.search(raw):
            latency = int(m.group(1)) / 1000
        if script.hang or "FAKE_HANG" in raw:
            stop.wait(3600)
            return
        if latency > 0 and stop.wait(latency):
            return
        status = script.status
        if m := _ERROR.search(raw):
            status = int(m.group(1))
        replies = _REPLY.findall(raw)
        reply = replies[-1] if replies else script.reply
        path = self.path.split("?", 1)[0]
        stream = bool(body.get("stream"))
        if status is not None:
            self._error(path, status)
        elif path.endswith("/responses"):
            tool = _TOOL.search(raw)
            if tool and not _has_item(body.get("input"), "function_call_output"):
                self._responses_tool_call(tool.group(1))
            else:
                self._responses(body, reply, stream)
        elif path.endswith("/messages"):
            call = _claude_call(raw)
            if call and not _has_item(body.get("messages"), "tool_result"):
                self._messages_tool_use(body, *call)
            else:
                self._messages(body, reply, stream)
        elif path.endswith("/chat/completions"):
            call = _chat_call(raw)
            messages = body.get("messages") or []
            if call and not any(_obj(m).get("role") == "tool" for m in messages):
                self._chat_tool_call(body, *call, stream)
            else:
                self._chat(body, reply, stream)
        else:
            self._send_json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def _error(self, path: str, status: int) -> None:
        message = f"fake error {status}"
        if path.endswith("/messages"):
            kind = "authentication_error" if status == 401 else "api_error"
            self._send_json(status, {"type": "error", "error": {"type": kind, "message": message}})
        else:
            kind = "invalid_api_key" if status == 401 else "server_error"
            self._send_json(status, {"error": {"message": message, "type": kind, "code": kind}})

    def _responses(self, body: dict[str, Any], reply: str, stream: bool) -> None:
        rid = f"resp_{uuid.uuid4().hex[:12]}"
        mid = f"msg_{uuid.uuid4().hex[:12]}"
        usage = {
            "input_tokens": 11,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 16,
        }
        part = {"type": "output_text", "text": reply, "annotations": []}
        done_item = {
            "type": "message",
            "id": mid,
            "role": "assistant",
            "status": "completed",
            "content": [part],
        }
        base = {
            "id": rid,
            "object": "response",
            "created_at": int(time.time()),
            "model": body.get("model", "fake-model"),
            "status": "in_progress",
            "output": [],
        }
        if not stream:
            self._send_json(
                200, {**base, "status": "completed", "output": [done_item], "usage": usage}
            )
            return
        added = {**done_item, "status": "in_progress", "content": []}
        events = [
            _sse("response.created", {"response": base}),
            _sse("response.in_progress", {"response": base}),
            _sse("response.output_item.added", {"output_index": 0, "item": added}),
            _sse(
                "response.content_part.added",
                {
                    "item_id": mid,
                    "output_index": 0,
                    "content_index": 0,
                    "part": {**part, "text": ""},
                },
            ),
            _sse(
                "response.output_text.delta",
                {"item_id": mid, "output_index": 0, "content_index": 0, "delta": reply},
            ),
            _sse(
                "response.output_text.done",
                {"item_id": mid, "output_index": 0, "content_index": 0, "text": reply},
            ),
            _sse(
                "response.content_part.done",
                {"item_id": mid, "output_index": 0, "content_index": 0, "part": part},
            ),
            _sse("response.output_item.done", {"output_index": 0, "item": done_item}),
            _sse(
                "response.completed",
                {
                    "response": {
                        **base,
                        "status": "completed",
                        "output": [done_item],
                        "usage": usage,
                    }
                },
            ),
        ]
        self._send_stream(events)

    def _responses_tool_call(self, command: str) -> None:
        rid = f"resp_{uuid.uuid4().hex[:12]}"
        call = {
            "type": "function_call",
            "id": f"fc_{uuid.uuid4().hex[:12]}",
            "call_id": f"call_{uuid.uuid4().hex[:12]}",
            "name": "exec_command",
            "arguments": json.dumps({"cmd": command}),
            "status": "completed",
        }
        base = {"id": rid, "object": "response", "status": "in_progress", "output": []}
        usage = {"input_tokens": 11, "output_tokens": 5, "total_tokens": 16}
        self._send_stream(
            [
                _sse("response.created", {"response": base}),
                _sse(
                    "response.output_item.added",
                    {"output_index": 0, "item": {**call, "arguments": "", "status": "in_progress"}},
                ),
                _sse("response.output_item.done", {"output_index": 0, "item": call}),
                _sse(
                    "response.completed",
                    {"response": {**base, "status": "completed", "output": [call], "usage": usage}},
                ),
            ]
        )

    def _messages_tool_use(self, body: dict[str, Any], name: str, args: dict[str, Any]) -> None:
        mid = f"msg_{uuid.uuid4().hex[:12]}"
        block = {
            "type": "tool_use",
            "id": f"toolu_{uuid.uuid4().hex[:12]}",
            "name": name,
            "input": {},
        }
        message = {
            "id": mid,
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "fake-model"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 11, "output_tokens": 1},
        }
        delta = {"type": "input_json_delta", "partial_json": json.dumps(args)}
        self._send_stream(
            [
                _sse("message_start", {"message": message}),
                _sse("content_block_start", {"index": 0, "content_block": block}),
                _sse("content_block_delta", {"index": 0, "delta": delta}),
                _sse("content_block_stop", {"index": 0}),
                _sse(
                    "message_delta",
                    {
                        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                        "usage": {"output_tokens": 5},
                    },
                ),
                _sse("message_stop", {}),
            ]
        )

    def _messages(self, body: dict[str, Any], reply: str, stream: bool) -> None:
        mid = f"msg_{uuid.uuid4().hex[:12]}"
        model = body.get("model", "fake-model")
        if not stream:
            self._send_json(
                200,
                {
                    "id": mid,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [{"type": "text", "text": reply}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 11, "output_tokens": 5},
                },
            )
            return
        message = {
            "id": mid,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 11, "output_tokens": 1},
        }
        events = [
            _sse("message_start", {"message": message}),
            _sse(
                "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
            ),
            _sse(
                "content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": reply}}
            ),
            _sse("content_block_stop", {"index": 0}),
            _sse(
                "message_delta",
                {
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 5},
                },
            ),
            _sse("message_stop", {}),
        ]
        self._send_stream(events)

    def _chat_tool_call(
        self, body: dict[str, Any], name: str, args: dict[str, Any], stream: bool
    ) -> None:
        call = {
            "id": f"call_{uuid.uuid4().hex[:12]}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        head = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "created": int(time.time()),
            "model": body.get("model", "fake-model"),
        }
        usage = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
        if not stream:
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
            self._send_json(
                200, {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
            )
            return
        delta = {"role": "assistant", "tool_calls": [{**call, "index": 0}]}
        chunks = [
            {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], "usage": usage},
        ]
        events = [
            f"data: {json.dumps({**head, 'object': 'chat.completion.chunk', **c})}\n\n".encode()
            for c in chunks
        ]
        self._send_stream([*events, b"data: [DONE]\n\n"])

    def _chat(self, body: dict[str, Any], reply: str, stream: bool) -> None:
        cid = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        model = body.get("model", "fake-model")
        created = int(time.time())
        usage = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
        if not stream:
            self._send_json(
                200,
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": usage,
                },
            )
            return

        def chunk(delta: dict[str, Any], finish: str | None, **extra: Any) -> bytes:
            data = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                **extra,
            }
            return f"data: {json.dumps(data)}\n\n".encode()

        events = [
            chunk({"role": "assistant", "content": ""}, None),
            chunk({"content": reply}, None),
            chunk({}, "stop", usage=usage),
            b"data: [DONE]\n\n",
        ]
        self._send_stream(events)

    # -- transport ---------------------------------------------------------------------------
    def _send_json(self, status: int, data: dict[str, Any]) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def _send_stream(self, events: list[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for event in events:
            self.wfile.write(event)
            self.wfile.flush()
        self.close_connection = True
