"""Codex CLI rollouts: ``<codex_home>/sessions/YYYY/MM/DD/rollout-*.jsonl`` and
``<codex_home>/archived_sessions/*.jsonl``.

Current rollouts wrap every line as ``{"timestamp", "type", "payload"}`` with types
``session_meta`` (id, cwd, git), ``turn_context`` (cwd), ``event_msg`` (``user_message`` /
``agent_message``) and ``response_item`` (``message`` with input/output text blocks,
``function_call``, ``custom_tool_call``, ``local_shell_call``, ``web_search_call``, ...).
Older rollouts put the response items directly on the line. The user's words appear
twice (event and response item); the event stream is preferred when present because the
response stream also carries injected context (environment, AGENTS.md). Codex 0.169 writes
``event_msg`` ``item_completed`` (``UserMessage`` / ``AgentMessage`` items) instead of
``user_message`` / ``agent_message``: the next choice. ``developer`` messages (skill lists,
instructions) are never the user's. A command that reads a ``skills/<name>/SKILL.md`` names
the skill the session used (Codex has no skill tool).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from skillopt_sleep.harvest.common import MAX_FINALS, SessionBuilder
from skillopt_sleep.harvest.digest import SourceKind
from skillopt_sleep.harvest.lines import visit_json_objects
from skillopt_sleep.harvest.refs import Listing, ReadOptions, Unreadable, file_refs
from skillopt_sleep.harvest.skillhint import skill_in_text
from skillopt_sleep.harvest.walk import files_below

__all__ = ["list_sessions", "read_session", "session_files"]

_MAX_RAW_MESSAGES = 200
_MAX_RAW_CHARS = 16_000
_TOOL_ITEMS = {
    "local_shell_call": "local_shell",
    "web_search_call": "web_search",
    "tool_search_call": "tool_search",
}


def session_files(codex_home: Path) -> Iterator[Path | Unreadable]:
    for sub in ("sessions", "archived_sessions"):
        yield from files_below(codex_home / sub, ".jsonl")


@dataclass(slots=True)
class _Stream:
    """One copy of the conversation (events or response items), bounded."""

    users: list[str] = field(default_factory=list)
    assistants: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_FINALS))
    n_assistants: int = 0

    def user(self, text: str) -> None:
        if len(self.users) < _MAX_RAW_MESSAGES:
            self.users.append(text[:_MAX_RAW_CHARS])

    def assistant(self, text: str) -> None:
        self.n_assistants += 1
        self.assistants.append(text[:_MAX_RAW_CHARS])


def _block_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [
        b["text"]
        for b in content
        if isinstance(b, dict)
        and b.get("type") in ("input_text", "output_text", "text", "Text")
        and isinstance(b.get("text"), str)
    ]
    return "\n".join(parts)


def _on_item(builder: SessionBuilder, item: dict[str, Any], responses: _Stream) -> None:
    kind = item.get("type")
    if kind == "message":
        text = _block_text(item.get("content"))
        if item.get("role") == "user" and text:
            responses.user(text)
        elif item.get("role") == "assistant" and text:
            responses.assistant(text)
    elif kind in ("function_call", "custom_tool_call") and isinstance(item.get("name"), str):
        builder.add_tool(item["name"])
        arguments = item.get("arguments") or item.get("input")
        if isinstance(arguments, str) and (skill := skill_in_text(arguments)):
            builder.add_skill(skill)
    elif isinstance(kind, str) and kind in _TOOL_ITEMS:
        builder.add_tool(_TOOL_ITEMS[kind])


def _on_completed(item: Any, items: _Stream) -> None:
    """An ``item_completed`` event (Codex 0.169+): the user's or the agent's message."""
    if not isinstance(item, dict):
        return
    text = _block_text(item.get("content"))
    if item.get("type") == "UserMessage" and text:
        items.user(text)
    elif item.get("type") == "AgentMessage" and text:
        items.assistant(text)


def _on_meta(builder: SessionBuilder, payload: dict[str, Any]) -> None:
    if not builder.session_id and isinstance(payload.get("id"), str):
        builder.session_id = payload["id"]
    builder.saw_cwd(payload.get("cwd"))
    git = payload.get("git")
    if not builder.git_branch and isinstance(git, dict) and isinstance(git.get("branch"), str):
        builder.git_branch = git["branch"]


def _visit(
    builder: SessionBuilder,
    events: _Stream,
    items: _Stream,
    responses: _Stream,
    record: dict[str, Any],
) -> None:
    builder.saw_time(record.get("timestamp"))
    payload = record.get("payload")
    if not isinstance(payload, dict):
        if "type" not in record and "id" in record:  # legacy first line (metadata)
            _on_meta(builder, record)
        else:
            _on_item(builder, record, responses)
        return
    builder.saw_time(payload.get("timestamp"))
    kind = record.get("type")
    if kind == "session_meta":
        _on_meta(builder, payload)
    elif kind == "turn_context":
        builder.saw_cwd(payload.get("cwd"))
    elif kind == "event_msg":
        message = payload.get("message")
        if payload.get("type") == "user_message" and isinstance(message, str):
            events.user(message)
        elif payload.get("type") == "agent_message" and isinstance(message, str):
            events.assistant(message)
        elif payload.get("type") == "item_completed":
            _on_completed(payload.get("item"), items)
    elif kind == "response_item":
        _on_item(builder, payload, responses)


def read_session(path: Path, options: ReadOptions) -> SessionBuilder:
    builder = SessionBuilder(source=SourceKind.CODEX, path=path, self_markers=options.self_markers)
    events, items, responses = _Stream(), _Stream(), _Stream()
    visit = partial(_visit, builder, events, items, responses)
    visit_json_objects(path, options.tally, visit, max_line_bytes=options.max_line_bytes)
    users = events.users or items.users or responses.users
    assistants = next((s for s in (events, items) if s.n_assistants), responses)
    for text in users:
        builder.add_user_text(text)
    for text in assistants.assistants:
        builder.add_assistant_text(text)
    builder.n_assistant = assistants.n_assistants
    return builder


def list_sessions(home: Path, scope: Path | None, resources: ExitStack) -> Listing:
    return file_refs(SourceKind.CODEX, session_files(home), read_session)
