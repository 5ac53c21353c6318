"""OpenCode sessions: its SQLite database (default ``$XDG_DATA_HOME/opencode/opencode.db``).

Tables used (opened read-only, see :mod:`sqlite_ro`): ``session`` (``id``, ``parent_id``,
``directory``, ``time_created``, ``time_updated`` in epoch milliseconds), ``message``
(``id``, ``session_id``, ``time_created``, ``data``: JSON with ``role`` and ``error``) and
``part`` (``id``, ``message_id``, ``session_id``, ``data``: JSON with ``type``). Parts of
type ``text`` (not ``synthetic``, not ``ignored``) give the words; ``tool`` parts give the
tool (``tool``; ``skill`` with ``state.input.name`` names the skill used) and older
``tool-invocation`` parts ``toolInvocation.toolName``. An assistant message with an
``error`` counts as negative feedback.

``opencode run "..."`` stores its arguments joined by spaces, each one that holds a space
wrapped in double quotes (inner quotes escaped), so a request given as one argument comes
back as ``"Add the orders migration"``. A user message of exactly that shape is unquoted
(:func:`unquote_run_message`); text the user really quoted (``"a" and "b"``) is left alone.

Only root sessions are read: a session with a ``parent_id`` is a sub-agent's (a task the
agent delegated), not the user's. A session's version is its ``time_updated`` and message
count, so one that went on is read again.
"""

from __future__ import annotations

import json
import re
import sqlite3
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from skillopt_sleep.harvest.common import SessionBuilder
from skillopt_sleep.harvest.digest import FeedbackSignal, Sentiment, SourceKind
from skillopt_sleep.harvest.refs import (
    Listing,
    Reader,
    ReadOptions,
    SessionRef,
    Unreadable,
    db_session,
    db_session_path,
    may_be_in_scope,
)
from skillopt_sleep.harvest.skillhint import skill_in_text
from skillopt_sleep.harvest.sqlite_ro import list_rows, misencoded, read_transaction

__all__ = ["DB_NAME", "list_sessions", "unquote_run_message"]

DB_NAME = "opencode.db"
_REQUIRED = {
    "session": {"id", "parent_id", "directory", "time_created", "time_updated"},
    "message": {"id", "session_id", "time_created", "data"},
    "part": {"id", "message_id", "session_id", "data"},
}
_SESSIONS = (
    "SELECT s.id, s.directory, s.time_updated,"
    " (SELECT count(*) FROM message m WHERE m.session_id = s.id)"
    " FROM session s WHERE s.parent_id IS NULL"
)
# Rows too long to be worth decoding come back NULL with their length (counted as overlong).
_PARTS = (
    "SELECT m.id, CASE WHEN length(m.data) > :max THEN NULL ELSE m.data END, m.time_created,"
    " CASE WHEN length(p.data) > :max THEN NULL ELSE p.data END, length(p.data)"
    " FROM message m LEFT JOIN part p ON p.message_id = m.id"
    " WHERE m.session_id = :sid ORDER BY m.time_created, m.id, p.id"
)


# One argument ``opencode run`` quoted: it holds a space, and any quote inside is escaped.
_RUN_ARGUMENT = re.compile(r'"((?:[^"\\]|\\.)* (?:[^"\\]|\\.)*)"', re.DOTALL)


def unquote_run_message(text: str) -> str:
    """The argument ``opencode run`` wrapped in quotes, or ``text`` itself when it is not
    exactly one such argument."""
    whole = _RUN_ARGUMENT.fullmatch(text)
    return whole.group(1).replace('\\"', '"') if whole else text


def _json(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class _Message:
    """One message's parts, gathered as its rows arrive."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.role = data.get("role")
        self.error = bool(data.get("error"))
        self.texts: list[str] = []

    def part(self, builder: SessionBuilder, part: dict[str, Any]) -> None:
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            if not part.get("synthetic") and not part.get("ignored"):
                self.texts.append(part["text"])
        elif kind == "tool" and isinstance(part.get("tool"), str):
            builder.add_tool(part["tool"])
            state = part.get("state")
            given = state.get("input") if isinstance(state, dict) else None
            if part["tool"] == "skill" and isinstance(given, dict):
                if isinstance(given.get("name"), str):
                    builder.add_skill(given["name"])
            elif skill := skill_in_text(json.dumps(given)):
                builder.add_skill(skill)
        elif kind == "tool-invocation":
            call = part.get("toolInvocation")
            if isinstance(call, dict) and isinstance(call.get("toolName"), str):
                builder.add_tool(call["toolName"])

    def finish(self, builder: SessionBuilder) -> None:
        if self.role == "user":
            for text in self.texts:
                builder.add_user_text(unquote_run_message(text))
        elif self.role == "assistant":
            builder.add_assistant_text("\n".join(self.texts))
            if self.error and builder.n_user:
                builder.feedback.append(
                    FeedbackSignal(
                        sentiment=Sentiment.NEGATIVE, cue="turn_error", turn=builder.n_user - 1
                    )
                )


def _reader(conn: sqlite3.Connection, db: Path, session_id: str, directory: str) -> Reader:
    def read(options: ReadOptions) -> SessionBuilder:
        builder = SessionBuilder(
            source=SourceKind.OPENCODE,
            path=db_session_path(db, session_id),
            self_markers=options.self_markers,
        )
        builder.session_id, builder.cwd = session_id, directory
        tally = options.tally
        current: tuple[str, _Message | None] | None = None
        params = {"max": options.max_line_bytes, "sid": session_id}
        with read_transaction(conn):
            for message_id, raw_message, created, raw_part, part_length in conn.execute(
                _PARTS, params
            ):
                if current is None or current[0] != message_id:
                    if current is not None and current[1] is not None:
                        current[1].finish(builder)
                    tally.lines += 1
                    tally.invalid_utf8 += misencoded(raw_message)
                    data = _json(raw_message)
                    if data is None:
                        tally.malformed += 1
                    builder.saw_time(created)
                    current = (message_id, _Message(data) if data is not None else None)
                if part_length is None:  # a message without parts
                    continue
                tally.lines += 1
                tally.invalid_utf8 += misencoded(raw_part)
                part = _json(raw_part)
                if raw_part is None:
                    tally.overlong += 1
                elif part is None:
                    tally.malformed += 1
                elif current[1] is not None:
                    current[1].part(builder, part)
            if current is not None and current[1] is not None:
                current[1].finish(builder)
        return builder

    return read


def list_sessions(db: Path, scope: Path | None, resources: ExitStack) -> Listing:
    """The root sessions of the database that may be ours."""
    if not db.is_file():
        return
    listed = list_rows(
        db, resources, required=_REQUIRED, query=_SESSIONS, what="an OpenCode database"
    )
    if isinstance(listed, Unreadable):
        yield listed
        return
    for session_id, directory, updated, n_messages in listed.rows:
        if not isinstance(session_id, str) or not isinstance(directory, str):
            continue
        if not Path(directory).is_absolute() or not isinstance(updated, int) or updated <= 0:
            continue
        if not may_be_in_scope(directory, scope):
            continue
        stamp = updated * 1_000_000
        file = db_session(SourceKind.OPENCODE, db, session_id, size=n_messages, mtime_ns=stamp)
        reader = _reader(listed.conn, db, session_id, directory)
        yield SessionRef(file=file, read=reader, cwd=directory)
