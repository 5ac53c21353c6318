"""Write sessions the way VS Code Copilot Chat, Copilot CLI, Cursor, Pi and OpenCode do.

Each writer follows the agent's documented on-disk format (see the reader modules in
``skillopt_sleep.harvest``), odd corners included: VS Code's operation-log patches, Pi's
version-2/3 trees with abandoned branches, SQLite databases in WAL mode whose latest rows
live only in the ``-wal`` file while the agent still has them open.
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from support.transcripts import Turn


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def set_mtime(path: Path, moment: datetime) -> None:
    os.utime(path, (moment.timestamp(), moment.timestamp()))


def jsonl(path: Path, records: Sequence[dict[str, Any] | str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# -- VS Code Copilot Chat ---------------------------------------------------------------------
COPILOT_AGENT = {
    "extensionId": {"value": "GitHub.copilot-chat", "_lower": "github.copilot-chat"},
    "id": "github.copilot.editsAgent",
    "name": "agent",
}


def vscode_request(turn: Turn, at: datetime, *, skill_file: str = "") -> dict[str, Any]:
    """A request as VS Code serializes it, answered already."""
    parts: list[dict[str, Any]] = [{"kind": "mcpServersStarting", "didStartServerIds": []}]
    for tool in turn.tools:
        parts.append(
            {
                "kind": "toolInvocationSerialized",
                "toolId": tool,
                "toolCallId": uuid.uuid4().hex,
                "invocationMessage": {"value": f"Running {tool}"},
                "pastTenseMessage": {
                    "value": f"Read [](file://{skill_file})" if skill_file else f"Ran {tool}"
                },
                "isComplete": True,
            }
        )
    parts.append({"value": turn.answer, "supportThemeIcons": False, "supportHtml": False})
    return {
        "requestId": f"request_{uuid.uuid4()}",
        "timestamp": ms(at),
        "agent": COPILOT_AGENT,
        "modelId": "copilot/gpt-x",
        "message": {"text": turn.user, "parts": [{"kind": "text", "text": turn.user}]},
        "variableData": {"variables": []},
        "response": parts,
        "result": {"timings": {"firstProgress": 900, "totalElapsed": 2100}, "metadata": {}},
        "modelState": {"value": 1, "completedAt": ms(at + timedelta(seconds=30))},
        "followups": [],
        "contentReferences": [],
    }


def write_vscode_storage(
    user_dir: Path,
    *,
    folder: Path | None = None,
    workspace_file: Path | None = None,
    remote: str = "",
) -> Path:
    """A ``workspaceStorage/<id>`` folder with its ``workspace.json``."""
    storage = user_dir / "workspaceStorage" / uuid.uuid4().hex
    (storage / "chatSessions").mkdir(parents=True)
    if folder is not None:
        data = {"folder": folder.as_uri()}
    elif workspace_file is not None:
        data = {"workspace": workspace_file.as_uri()}
    else:
        data = {"folder": remote}
    (storage / "workspace.json").write_text(json.dumps(data), encoding="utf-8")
    return storage


def write_vscode_session(
    storage: Path,
    *,
    turns: Sequence[Turn],
    start: datetime,
    session_id: str | None = None,
    skill_file: str = "",
    extra: Sequence[dict[str, Any] | str] = (),
) -> Path:
    """An operation log as VS Code writes it while the chat goes on: the initial state holds
    the first request; each later request is pushed; its answer streams in (a push that
    rewrites the last part, ``i``), ``modelState`` is set when it completes; ``extra``
    entries are appended as they are."""
    sid = session_id or str(uuid.uuid4())
    now = start
    first = vscode_request(turns[0], now, skill_file=skill_file)
    initial = {
        "version": 3,
        "sessionId": sid,
        "creationDate": ms(now),
        "requesterUsername": "u",
        "responderUsername": "GitHub Copilot",
        "initialLocation": "panel",
        "requests": [first],
        "inputState": "{}",
    }
    log: list[dict[str, Any] | str] = [{"kind": 0, "v": initial}]
    for index, turn in enumerate(turns[1:], start=1):
        now += timedelta(minutes=2)
        request = vscode_request(turn, now, skill_file=skill_file)
        answer = request["response"][-1]
        streaming = {**request, "response": request["response"][:-1], "modelState": {"value": 0}}
        log.append({"kind": 2, "k": ["requests"], "v": [streaming]})
        half = {**answer, "value": answer["value"][: len(answer["value"]) // 2]}
        log.append({"kind": 2, "k": ["requests", index, "response"], "v": [half]})
        parts = len(request["response"]) - 1
        log.append({"kind": 2, "k": ["requests", index, "response"], "v": [answer], "i": parts})
        log.append({"kind": 1, "k": ["requests", index, "modelState"], "v": request["modelState"]})
        log.append({"kind": 1, "k": ["requests", index, "result"], "v": {"timings": {}}})
    log.append({"kind": 3, "k": ["inputState"]})
    log.extend(extra)
    path = jsonl(storage / "chatSessions" / f"{sid}.jsonl", log)
    set_mtime(path, now + timedelta(minutes=1))
    return path


# -- Copilot CLI ---------------------------------------------------------------------------
def write_copilot_cli_session(
    home: Path,
    *,
    cwd: Path,
    turns: Sequence[Turn],
    start: datetime,
    session_id: str | None = None,
    skill: str = "",
    extra: Sequence[dict[str, Any] | str] = (),
) -> Path:
    """``session-state/<id>/events.jsonl`` and ``workspace.yaml`` as Copilot CLI 1.0 writes them."""
    sid = session_id or str(uuid.uuid4())
    folder = home / "session-state" / sid
    now = start
    parent: str | None = None
    events: list[dict[str, Any] | str] = []

    def event(kind: str, data: dict[str, Any], **more: Any) -> None:
        nonlocal parent
        eid = str(uuid.uuid4())
        events.append(
            {
                "type": kind,
                "data": data,
                "id": eid,
                "timestamp": iso(now),
                "parentId": parent,
                **more,
            }
        )
        parent = eid

    context = {"cwd": str(cwd), "branch": "main", "gitRoot": str(cwd)}
    event(
        "session.start",
        {
            "sessionId": sid,
            "version": 1,
            "producer": "copilot-agent",
            "copilotVersion": "1.0.102",
            "startTime": iso(now),
            "context": context,
        },
    )
    for index, turn in enumerate(turns):
        event(
            "user.message",
            {
                "content": turn.user,
                "transformedContent": f"<current_datetime>{iso(now)}</current_datetime>\n"
                + turn.user,
                "interactionId": str(index),
                "turnId": "0",
            },
        )
        event("system.message", {"role": "system", "content": "You are the GitHub Copilot CLI."})
        requests = [
            {"toolCallId": f"c{index}{t}", "name": t, "arguments": {}, "type": "function"}
            for t in turn.tools
        ]
        if skill:
            requests.append(
                {
                    "toolCallId": f"s{index}",
                    "name": "skill",
                    "arguments": {"skill": skill},
                    "type": "function",
                }
            )
        event("assistant.turn_start", {"turnId": "0"})
        event(
            "assistant.message",
            {"messageId": str(uuid.uuid4()), "content": "", "toolRequests": requests},
        )
        for request in requests:
            event(
                "tool.execution_start",
                {"toolCallId": request["toolCallId"], "toolName": request["name"], "arguments": {}},
            )
        if skill:
            event(
                "skill.invoked",
                {
                    "name": skill,
                    "path": f"{cwd}/.github/skills/{skill}/SKILL.md",
                    "content": "Do it well.",
                    "trigger": "agent-invoked",
                },
            )
            event("user.message", {"content": "Follow the skill.", "source": f"skill-{skill}"})
        now += timedelta(minutes=1)
        event(
            "assistant.message",
            {"messageId": str(uuid.uuid4()), "content": turn.answer, "toolRequests": []},
        )
        event("assistant.turn_end", {"turnId": "0"})
        now += timedelta(minutes=1)
    event("session.shutdown", {"accountingSnapshot": {}})
    events.extend(extra)
    path = jsonl(folder / "events.jsonl", events)
    (folder / "workspace.yaml").write_text(
        f"id: {sid}\ncwd: {cwd}\nclient_name: github/cli\nname: {json.dumps(turns[0].user)}\n"
        f"user_named: false\ncreated_at: {iso(start)}\nupdated_at: {iso(now)}\n",
        encoding="utf-8",
    )
    set_mtime(path, now)
    return path


COPILOT_STORE_SCHEMA = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE sessions (id TEXT PRIMARY KEY, cwd TEXT, repository TEXT, host_type TEXT,
    branch TEXT, summary TEXT, created_at TEXT DEFAULT (datetime('now')),
    updated_at TEXT DEFAULT (datetime('now')));
CREATE TABLE turns (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL
    REFERENCES sessions(id), turn_index INTEGER NOT NULL, user_message TEXT,
    assistant_response TEXT, timestamp TEXT DEFAULT (datetime('now')),
    UNIQUE(session_id, turn_index));
CREATE TABLE session_files (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL
    REFERENCES sessions(id), file_path TEXT NOT NULL, tool_name TEXT, turn_index INTEGER,
    first_seen_at TEXT DEFAULT (datetime('now')), UNIQUE(session_id, file_path));
CREATE VIRTUAL TABLE search_index USING fts5(content, session_id UNINDEXED,
    source_type UNINDEXED, source_id UNINDEXED);
"""


@dataclass
class StoredSession:
    """One row of a Copilot CLI session store (or of an OpenCode database)."""

    cwd: str
    turns: Sequence[Turn]
    start: datetime
    session_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    files: Sequence[tuple[str, str]] = ()  # (file_path, tool_name)
    parent_id: str | None = None
    skill: str = ""
    error_on_last: bool = False


def wal_database(path: Path, schema: str) -> sqlite3.Connection:
    """A database in WAL mode that never checkpoints on its own: while the returned
    connection stays open, what it writes lives only in the ``-wal`` file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.executescript(schema)
    return conn


def store_copilot_sessions(conn: sqlite3.Connection, sessions: Sequence[StoredSession]) -> None:
    for s in sessions:
        updated = s.start + timedelta(minutes=2 * len(s.turns))
        conn.execute(
            "INSERT INTO sessions (id, cwd, branch, summary, created_at, updated_at)"
            " VALUES (?, ?, 'main', ?, ?, ?)",
            (s.session_id, s.cwd, s.turns[-1].user, iso(s.start), iso(updated)),
        )
        for index, turn in enumerate(s.turns):
            conn.execute(
                "INSERT INTO turns (session_id, turn_index, user_message, assistant_response,"
                " timestamp) VALUES (?, ?, ?, ?, ?)",
                (
                    s.session_id,
                    index,
                    turn.user,
                    turn.answer,
                    iso(s.start + timedelta(minutes=2 * index)),
                ),
            )
            conn.execute(
                "INSERT INTO search_index (content, session_id, source_type, source_id)"
                " VALUES (?, ?, 'turn', ?)",
                (turn.user, s.session_id, str(index)),
            )
        for file_path, tool in s.files:
            conn.execute(
                "INSERT INTO session_files (session_id, file_path, tool_name) VALUES (?, ?, ?)",
                (s.session_id, file_path, tool),
            )


# -- Cursor ---------------------------------------------------------------------------------
def cursor_slug(path: Path) -> str:
    """How Cursor names a project's folder: non-alphanumeric runs become ``-``."""
    out, dash = [], False
    for ch in str(path):
        if ch.isascii() and ch.isalnum():
            out.append(ch)
            dash = False
        elif not dash:
            out.append("-")
            dash = True
    return "".join(out).strip("-")


def write_cursor_session(
    home: Path,
    *,
    project: Path,
    turns: Sequence[Turn],
    modified: datetime,
    session_id: str | None = None,
    trusted: bool = False,
    failed_turns: Sequence[int] = (),
    skill_file: str = "",
    extra: Sequence[dict[str, Any] | str] = (),
) -> Path:
    """``projects/<slug>/agent-transcripts/<id>/<id>.jsonl`` as Cursor writes it."""
    sid = session_id or str(uuid.uuid4())
    folder = home / "projects" / cursor_slug(project)
    if trusted:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ".workspace-trusted").write_text(
            json.dumps({"workspacePath": str(project), "trustedAt": iso(modified)}),
            encoding="utf-8",
        )
    lines: list[dict[str, Any] | str] = []
    for index, turn in enumerate(turns):
        text = (
            f"<user_info>OS: linux, shell: bash, workspace: {project}</user_info>\n"
            f"<user_query>\n{turn.user}\n</user_query>"
        )
        lines.append({"role": "user", "message": {"content": [{"type": "text", "text": text}]}})
        blocks: list[dict[str, Any]] = []
        for tool in turn.tools:
            given = {"path": skill_file} if skill_file and tool == "Read" else {"command": "ls"}
            blocks.append({"type": "tool_use", "id": f"t{index}", "name": tool, "input": given})
        if blocks:
            lines.append({"role": "assistant", "message": {"content": blocks}})
            lines.append(
                {
                    "role": "user",
                    "message": {
                        "content": [
                            {"type": "tool_result", "tool_use_id": f"t{index}", "content": "ok"}
                        ]
                    },
                }
            )
        lines.append(
            {"role": "assistant", "message": {"content": [{"type": "text", "text": turn.answer}]}}
        )
        status = "error" if index in failed_turns else "success"
        lines.append({"type": "turn_ended", "status": status})
    lines.extend(extra)
    path = jsonl(folder / "agent-transcripts" / sid / f"{sid}.jsonl", lines)
    set_mtime(path, modified)
    return path


# -- Pi -------------------------------------------------------------------------------------
def pi_path(sessions: Path, cwd: Path, start: datetime, session_id: str) -> Path:
    """Where Pi writes a session of ``cwd`` in its sessions folder (by default
    ``~/.pi/agent/sessions``): one folder per project, named after its path."""
    folder = "--" + str(cwd).strip("/").replace("/", "-") + "--"
    stamp = start.astimezone(UTC).strftime("%Y-%m-%dT%H-%M-%S-000Z")
    return sessions / folder / f"{stamp}_{session_id}.jsonl"


def pi_message(
    entry_id: str, parent: str | None, at: datetime, message: dict[str, Any]
) -> dict[str, Any]:
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": iso(at),
        "message": {**message, "timestamp": ms(at)},
    }


def pi_user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def pi_assistant(text: str, tools: Sequence[tuple[str, dict[str, Any]]] = ()) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "thinking", "thinking": "Let me see."}]
    content += [
        {"type": "toolCall", "id": f"call_{n}", "name": n, "arguments": a} for n, a in tools
    ]
    content.append({"type": "text", "text": text})
    return {
        "role": "assistant",
        "content": content,
        "api": "anthropic-messages",
        "provider": "anthropic",
        "model": "claude-x",
        "stopReason": "stop",
        "usage": {"input": 10, "output": 5},
    }


def pi_header(session_id: str, cwd: Path, start: datetime, version: int | None) -> dict[str, Any]:
    header: dict[str, Any] = {
        "type": "session",
        "id": session_id,
        "timestamp": iso(start),
        "cwd": str(cwd),
    }
    if version is not None:
        header["version"] = version
    return header


@contextmanager
def writer_holding(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """Keep the agent's connection open (its WAL unmerged) for the block, then close it."""
    try:
        yield conn
    finally:
        conn.close()


# -- OpenCode ---------------------------------------------------------------------------------
OPENCODE_SCHEMA = """
CREATE TABLE project (id text PRIMARY KEY, worktree text NOT NULL, vcs text, name text,
    time_created integer NOT NULL, time_updated integer NOT NULL);
CREATE TABLE session (id text PRIMARY KEY, project_id text NOT NULL, parent_id text,
    slug text NOT NULL, directory text NOT NULL, title text NOT NULL, version text NOT NULL,
    share_url text, summary_additions integer, summary_deletions integer,
    summary_files integer, summary_diffs text, revert text, permission text,
    time_created integer NOT NULL, time_updated integer NOT NULL, time_compacting integer,
    time_archived integer, workspace_id text, path text, agent text, model text);
CREATE TABLE message (id text PRIMARY KEY, session_id text NOT NULL,
    time_created integer NOT NULL, time_updated integer NOT NULL, data text NOT NULL);
CREATE TABLE part (id text PRIMARY KEY, message_id text NOT NULL, session_id text NOT NULL,
    time_created integer NOT NULL, time_updated integer NOT NULL, data text NOT NULL);
CREATE INDEX message_session_time_created_id_idx ON message (session_id, time_created, id);
CREATE INDEX part_message_id_id_idx ON part (message_id, id);
CREATE INDEX part_session_idx ON part (session_id);
"""


def store_opencode_sessions(conn: sqlite3.Connection, sessions: Sequence[StoredSession]) -> None:
    for s in sessions:
        now = s.start
        conn.execute(
            "INSERT OR IGNORE INTO project VALUES ('p1', '/', 'git', 'p', ?, ?)", (ms(now), ms(now))
        )
        messages: list[tuple[str, int, dict[str, Any], list[dict[str, Any]]]] = []
        for index, turn in enumerate(s.turns):
            user = {
                "role": "user",
                "time": {"created": ms(now)},
                "agent": "build",
                "model": {"providerID": "anthropic", "modelID": "claude-x"},
            }
            messages.append(
                (
                    f"msg_{s.session_id}_{index}u",
                    ms(now),
                    user,
                    [
                        {"type": "text", "text": turn.user},
                        {
                            "type": "text",
                            "text": "<system-reminder>plan mode</system-reminder>",
                            "synthetic": True,
                        },
                        {
                            "type": "file",
                            "mime": "text/plain",
                            "filename": "notes.md",
                            "url": "file:///notes.md",
                        },
                    ],
                )
            )
            now += timedelta(minutes=1)
            assistant: dict[str, Any] = {
                "role": "assistant",
                "time": {"created": ms(now), "completed": ms(now) + 500},
                "parentID": f"msg_{s.session_id}_{index}u",
                "modelID": "claude-x",
                "providerID": "anthropic",
                "mode": "build",
                "agent": "build",
                "path": {"cwd": s.cwd, "root": s.cwd},
                "cost": 0.01,
                "tokens": {
                    "input": 10,
                    "output": 5,
                    "reasoning": 0,
                    "cache": {"read": 0, "write": 0},
                },
            }
            if s.error_on_last and index == len(s.turns) - 1:
                assistant["error"] = {"name": "APIError", "data": {"message": "overloaded"}}
            parts: list[dict[str, Any]] = [{"type": "step-start"}]
            parts.append({"type": "reasoning", "text": "thinking", "time": {"start": ms(now)}})
            for tool in turn.tools:
                parts.append(
                    {
                        "type": "tool",
                        "callID": f"call_{tool}",
                        "tool": tool,
                        "state": {
                            "status": "completed",
                            "input": {"command": "ls"},
                            "output": "ok",
                            "title": tool,
                        },
                    }
                )
            if s.skill:
                parts.append(
                    {
                        "type": "tool",
                        "callID": "call_skill",
                        "tool": "skill",
                        "state": {
                            "status": "completed",
                            "input": {"name": s.skill},
                            "output": "<skill_content>",
                        },
                    }
                )
            parts.append({"type": "text", "text": turn.answer, "time": {"start": ms(now)}})
            parts.append({"type": "step-finish", "reason": "stop", "cost": 0.01})
            messages.append((f"msg_{s.session_id}_{index}a", ms(now), assistant, parts))
            now += timedelta(minutes=1)
        conn.execute(
            "INSERT INTO session (id, project_id, parent_id, slug, directory, title, version,"
            " time_created, time_updated, agent) VALUES (?, 'p1', ?, 'slug', ?, 'title',"
            " '1.0.0', ?, ?, 'build')",
            (s.session_id, s.parent_id, s.cwd, ms(s.start), ms(now)),
        )
        for message_id, created, data, parts in messages:
            conn.execute(
                "INSERT INTO message VALUES (?, ?, ?, ?, ?)",
                (message_id, s.session_id, created, created, json.dumps(data)),
            )
            for n, part in enumerate(parts):
                conn.execute(
                    "INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        f"prt_{message_id}_{n:03d}",
                        message_id,
                        s.session_id,
                        created,
                        created,
                        json.dumps(part),
                    ),
                )
