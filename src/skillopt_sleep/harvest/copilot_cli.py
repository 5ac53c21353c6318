"""GitHub Copilot CLI sessions: ``<copilot_home>/session-state`` and ``session-store.db``.

Copilot CLI 1.0.x keeps each session as ``session-state/<id>/events.jsonl`` (one event a
line: ``{"type", "data", "id", "timestamp", "parentId"}``) beside a ``workspace.yaml``
(``id``, ``cwd``, ``created_at``, ...); older versions wrote ``session-state/<id>.jsonl``.
The events that matter:

- ``session.start`` / ``session.resume``: ``data.sessionId``, ``data.context`` (``cwd``,
  ``branch``);
- ``user.message``: ``data.content`` as the user typed it (``transformedContent`` is what
  the model saw, with injected context). Messages with a ``data.source`` (a skill's hidden
  injection, another agent's prompt) or ``isAutopilotContinuation`` are not the user's;
- ``assistant.message``: ``data.content`` and ``data.toolRequests[].name``;
- ``tool.execution_start``: ``data.toolName``; ``skill.invoked``: ``data.name``.

Events with an ``agentId`` come from a sub-agent and are skipped.

``session-store.db`` (SQLite: ``sessions``, ``turns``, ``session_files``) indexes the same
sessions, but is lossy: a resumed session restarts ``turn_index`` at 0 and overwrites the
earlier turns. It is read (read-only, see :mod:`sqlite_ro`) only for sessions that have no
event log any more.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from skillopt_sleep.harvest.common import SessionBuilder
from skillopt_sleep.harvest.digest import SourceKind
from skillopt_sleep.harvest.lines import iter_json_objects
from skillopt_sleep.harvest.refs import (
    Listing,
    Reader,
    ReadOptions,
    SessionRef,
    Unreadable,
    db_session,
    db_session_path,
    file_refs,
    may_be_in_scope,
)
from skillopt_sleep.harvest.skillhint import skill_in_text
from skillopt_sleep.harvest.sqlite_ro import columns, list_rows, misencoded, read_transaction
from skillopt_sleep.harvest.timeparse import parse_instant
from skillopt_sleep.harvest.walk import entries

__all__ = [
    "EVENTS_FILE",
    "STATE_DIR",
    "STORE_DB",
    "WORKSPACE_FILE",
    "list_sessions",
    "read_events",
    "workspace_fields",
]

STATE_DIR = "session-state"
EVENTS_FILE = "events.jsonl"
WORKSPACE_FILE = "workspace.yaml"
STORE_DB = "session-store.db"
_WORKSPACE_MAX_BYTES = 64 * 1024
_MAX_TURN_CHARS = 16_000
_CONTEXT_LOAD = "context-load"  # a skill preloaded for a custom agent, not one the task used


# -- the event logs -------------------------------------------------------------------------
def _event_logs(home: Path) -> Iterator[tuple[str, Path] | Unreadable]:
    listed = entries(home / STATE_DIR)
    if isinstance(listed, Unreadable):
        yield listed
        return
    for entry in listed:
        if entry.is_dir() and (entry / EVENTS_FILE).is_file():
            yield entry.name, entry / EVENTS_FILE
        elif entry.suffix == ".jsonl" and entry.is_file():
            yield entry.stem, entry


def workspace_fields(path: Path) -> dict[str, str]:
    """The top-level ``key: value`` scalars of a ``workspace.yaml`` (all this reader needs)."""
    try:
        with open(path, "rb") as handle:
            text = handle.read(_WORKSPACE_MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line[0] in " \t#-" or ":" not in line:
            continue
        key, _, raw = line.partition(":")
        value = raw.strip()
        if value.startswith('"'):
            try:
                value = str(json.loads(value))
            except ValueError:
                continue
        elif value.startswith("'") and value.endswith("'") and len(value) >= 2:
            value = value[1:-1].replace("''", "'")
        fields[key.strip()] = value
    return fields


def _log_cwd(path: Path) -> str | None:
    if path.name != EVENTS_FILE:
        return None
    return workspace_fields(path.with_name(WORKSPACE_FILE)).get("cwd") or None


def _data(event: dict[str, Any]) -> dict[str, Any]:
    data = event.get("data")
    return data if isinstance(data, dict) else {}


def _on_context(builder: SessionBuilder, context: Any) -> None:
    if not isinstance(context, dict):
        return
    if not builder.cwd and isinstance(context.get("cwd"), str):
        builder.cwd = context["cwd"]
    if not builder.git_branch and isinstance(context.get("branch"), str):
        builder.git_branch = context["branch"]


def _on_user(builder: SessionBuilder, data: dict[str, Any]) -> None:
    if data.get("source") or data.get("isAutopilotContinuation") is True:
        return
    if isinstance(data.get("content"), str):
        builder.add_user_text(data["content"])


def _on_assistant(builder: SessionBuilder, data: dict[str, Any]) -> None:
    for request in data.get("toolRequests") or ():
        if not isinstance(request, dict) or not isinstance(request.get("name"), str):
            continue
        builder.add_tool(request["name"])
        arguments = request.get("arguments")
        if request["name"] == "skill" and isinstance(arguments, dict):
            if isinstance(arguments.get("skill"), str):
                builder.add_skill(arguments["skill"])
        elif skill := skill_in_text(json.dumps(arguments)):
            builder.add_skill(skill)
    if isinstance(data.get("content"), str):
        builder.add_assistant_text(data["content"])


def _used_skill(data: dict[str, Any]) -> bool:
    """A skill the task invoked (not one preloaded for a custom agent)."""
    return isinstance(data.get("name"), str) and data.get("trigger") != _CONTEXT_LOAD


def read_events(path: Path, options: ReadOptions) -> SessionBuilder:
    builder = SessionBuilder(
        source=SourceKind.COPILOT_CLI, path=path, self_markers=options.self_markers
    )
    builder.cwd = _log_cwd(path) or ""
    iterator = iter_json_objects(path, options.tally, max_line_bytes=options.max_line_bytes)
    for event in iterator:
        builder.saw_time(event.get("timestamp"))
        if event.get("agentId"):
            continue
        kind, data = event.get("type"), _data(event)
        if kind in ("session.start", "session.resume"):
            if not builder.session_id and isinstance(data.get("sessionId"), str):
                builder.session_id = data["sessionId"]
            _on_context(builder, data.get("context"))
        elif kind == "session.context_changed":
            _on_context(builder, data)
        elif kind == "user.message":
            _on_user(builder, data)
        elif kind == "assistant.message":
            _on_assistant(builder, data)
        elif kind == "tool.execution_start" and isinstance(data.get("toolName"), str):
            builder.add_tool(data["toolName"])
        elif kind == "skill.invoked" and _used_skill(data):
            builder.add_skill(data["name"])
    if not builder.session_id:
        builder.session_id = path.parent.name if path.name == EVENTS_FILE else path.stem
    return builder


# -- the session store ------------------------------------------------------------------------
_SESSIONS = (
    "SELECT s.id, s.cwd, s.branch, s.updated_at, count(t.session_id)"
    " FROM sessions s LEFT JOIN turns t ON t.session_id = s.id GROUP BY s.id"
)
_TURNS = (
    "SELECT turn_index, substr(user_message, 1, ?), substr(assistant_response, 1, ?), timestamp"
    " FROM turns WHERE session_id = ? ORDER BY turn_index"
)
_FILES = "SELECT file_path, tool_name FROM session_files WHERE session_id = ? LIMIT 500"
_REQUIRED = {"sessions": {"id", "cwd", "updated_at"}, "turns": {"session_id", "turn_index"}}


def _read_stored(
    conn: sqlite3.Connection, db: Path, session_id: str, cwd: str, branch: str
) -> Reader:
    def read(options: ReadOptions) -> SessionBuilder:
        builder = SessionBuilder(
            source=SourceKind.COPILOT_CLI,
            path=db_session_path(db, session_id),
            self_markers=options.self_markers,
        )
        builder.session_id, builder.cwd, builder.git_branch = session_id, cwd, branch
        with read_transaction(conn):
            limit = _MAX_TURN_CHARS
            for _, user, answer, stamp in conn.execute(_TURNS, (limit, limit, session_id)):
                options.tally.lines += 1
                options.tally.invalid_utf8 += misencoded(user, answer)
                if any(v is not None and not isinstance(v, str) for v in (user, answer)):
                    options.tally.malformed += 1  # a turn stored as bytes or a number
                builder.saw_time(stamp)
                if isinstance(user, str):
                    builder.add_user_text(user)
                if isinstance(answer, str):
                    builder.add_assistant_text(answer)
            if "file_path" in columns(conn, "session_files"):
                for file_path, tool in conn.execute(_FILES, (session_id,)):
                    if isinstance(tool, str):
                        builder.add_tool(tool)
                    if isinstance(file_path, str) and (skill := skill_in_text(file_path)):
                        builder.add_skill(skill)
        return builder

    return read


def _stored_refs(db: Path, scope: Path | None, skip: set[str], resources: ExitStack) -> Listing:
    listed = list_rows(
        db, resources, required=_REQUIRED, query=_SESSIONS, what="a Copilot CLI session store"
    )
    if isinstance(listed, Unreadable):
        yield listed
        return
    for session_id, cwd, branch, updated, n_turns in listed.rows:
        if not isinstance(session_id, str) or session_id in skip or not isinstance(cwd, str):
            continue
        moment = parse_instant(updated)
        if not cwd or moment is None or not may_be_in_scope(cwd, scope):
            continue
        stamp = int(moment.timestamp() * 1_000_000_000)
        file = db_session(SourceKind.COPILOT_CLI, db, session_id, size=n_turns, mtime_ns=stamp)
        branch = branch if isinstance(branch, str) else ""
        yield SessionRef(
            file=file, read=_read_stored(listed.conn, db, session_id, cwd, branch), cwd=cwd
        )


def list_sessions(home: Path, scope: Path | None, resources: ExitStack) -> Listing:
    """Every event log, then the stored sessions that have none."""
    logged: set[str] = set()
    paths: list[Path | Unreadable] = []
    for log in _event_logs(home):
        if isinstance(log, Unreadable):
            paths.append(log)
            continue
        session_id, path = log
        logged.add(session_id)
        paths.append(path)
    for ref in file_refs(SourceKind.COPILOT_CLI, paths, read_events, cwd_of=_log_cwd):
        if isinstance(ref, Unreadable) or may_be_in_scope(ref.cwd, scope):
            yield ref
    db = home / STORE_DB
    if db.is_file():
        yield from _stored_refs(db, scope, logged, resources)
