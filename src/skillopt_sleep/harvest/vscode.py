"""VS Code Copilot Chat sessions: ``<User>/workspaceStorage/<id>/chatSessions/*.jsonl``.

``<User>`` is the user data folder of a VS Code flavour (Code, Code - Insiders, VSCodium,
Cursor, a remote server; see :mod:`locations`). The project is the adjacent
``workspace.json``: its ``folder`` URI, or the folder holding its ``workspace`` file; a
workspace storage with neither (or a remote URI) cannot be placed in a project and is
only read for ``--scope all``. Sessions of an empty window (``globalStorage``) have no
project and are not read.

Each file is an operation log (see :mod:`oplog`) whose state is the serialized session:
``sessionId``, ``creationDate`` and ``requests[]``, each with ``message.text`` (the
prompt), ``timestamp``, ``modelState.completedAt``, ``agent`` (``extensionId``; requests
answered by another extension's participant are not Copilot's) and ``isSystemInitiated``
(not the user's), and ``response[]`` parts: markdown (no ``kind``, or ``markdownContent``)
gives the answer, ``toolInvocationSerialized`` the tool (``toolId``) and, when its message
names a ``skills/<name>/SKILL.md``, the skill.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from skillopt_sleep.harvest.common import SessionBuilder
from skillopt_sleep.harvest.digest import SourceKind
from skillopt_sleep.harvest.lines import iter_json_objects
from skillopt_sleep.harvest.oplog import LEAF, WHOLE, Shape, replay
from skillopt_sleep.harvest.refs import (
    Listing,
    ReadOptions,
    Unreadable,
    file_refs,
    may_be_in_scope,
)
from skillopt_sleep.harvest.skillhint import skill_in_text
from skillopt_sleep.harvest.walk import entries

__all__ = [
    "COPILOT_EXTENSION",
    "SESSION_SHAPE",
    "list_sessions",
    "path_of_uri",
    "read_session",
    "workspace_folder",
]

COPILOT_EXTENSION = "github.copilot-chat"
_WORKSPACE_MAX_BYTES = 64 * 1024
_WINDOWS_DRIVE = re.compile(r"^/[A-Za-z]:")

_PART = Shape(
    fields={
        "kind": LEAF,
        "value": LEAF,
        "content": Shape(fields={"value": LEAF}),
        "toolId": LEAF,
        "invocationMessage": WHOLE,
        "pastTenseMessage": WHOLE,
    }
)
_REQUEST = Shape(
    fields={
        "requestId": LEAF,
        "timestamp": LEAF,
        "isSystemInitiated": LEAF,
        "message": Shape(fields={"text": LEAF}),
        "agent": Shape(fields={"extensionId": WHOLE, "id": LEAF}),
        "modelState": Shape(fields={"value": LEAF, "completedAt": LEAF}),
        "response": Shape(items=_PART),
    }
)
SESSION_SHAPE = Shape(
    fields={
        "sessionId": LEAF,
        "creationDate": LEAF,
        "lastMessageDate": LEAF,
        "requests": Shape(items=_REQUEST),
    }
)


def path_of_uri(uri: str) -> str | None:
    """The local path of a ``file:`` URI (``None`` for any other scheme)."""
    parsed = urlparse(uri)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        return None
    path = unquote(parsed.path)
    if _WINDOWS_DRIVE.match(path):
        path = path[1:]
    return path or None


def workspace_folder(storage: Path) -> str | None:
    """The project a workspace storage belongs to, from its ``workspace.json``."""
    try:
        with open(storage / "workspace.json", "rb") as handle:
            data = json.loads(handle.read(_WORKSPACE_MAX_BYTES))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("folder"), str):
        return path_of_uri(data["folder"])
    if isinstance(data.get("workspace"), str):
        file = path_of_uri(data["workspace"])
        return str(Path(file).parent) if file else None
    return None


def _storages(user_dir: Path) -> Iterator[Path | Unreadable]:
    listed = entries(user_dir / "workspaceStorage")
    if isinstance(listed, Unreadable):
        yield listed
        return
    yield from (p for p in listed if (p / "chatSessions").is_dir())


def _extension(agent: Any) -> str:
    if not isinstance(agent, dict):
        return ""
    ext = agent.get("extensionId")
    if isinstance(ext, dict):
        ext = ext.get("_lower") or ext.get("value")
    return ext.lower() if isinstance(ext, str) else ""


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("value"), str):
        return str(value["value"])
    return ""


def _on_response(builder: SessionBuilder, parts: Any) -> None:
    texts: list[str] = []
    for part in parts if isinstance(parts, list) else ():
        if not isinstance(part, dict):
            continue
        kind = part.get("kind")
        if kind is None and isinstance(part.get("value"), str):
            texts.append(part["value"])
        elif kind == "markdownContent":
            texts.append(_text(part.get("content")) or _text(part.get("value")))
        elif kind == "toolInvocationSerialized":
            if isinstance(part.get("toolId"), str):
                builder.add_tool(part["toolId"])
            said = _text(part.get("pastTenseMessage")) + _text(part.get("invocationMessage"))
            if skill := skill_in_text(said):
                builder.add_skill(skill)
    builder.add_assistant_text("".join(texts))


def _on_request(builder: SessionBuilder, request: Any) -> None:
    if not isinstance(request, dict) or request.get("isSystemInitiated") is True:
        return
    extension = _extension(request.get("agent"))
    if extension and extension != COPILOT_EXTENSION:
        return
    builder.saw_time(request.get("timestamp"))
    model_state = request.get("modelState")
    if isinstance(model_state, dict):
        builder.saw_time(model_state.get("completedAt"))
    message = request.get("message")
    if isinstance(message, dict) and isinstance(message.get("text"), str):
        builder.add_user_text(message["text"])
    _on_response(builder, request.get("response"))


def read_session(path: Path, options: ReadOptions) -> SessionBuilder:
    markers = options.self_markers
    builder = SessionBuilder(source=SourceKind.COPILOT, path=path, self_markers=markers)
    builder.cwd = workspace_folder(path.parent.parent) or ""
    entries = iter_json_objects(path, options.tally, max_line_bytes=options.max_line_bytes)
    state = replay(entries, SESSION_SHAPE, options.tally)
    if not isinstance(state, dict):
        return builder
    builder.session_id = state["sessionId"] if isinstance(state.get("sessionId"), str) else ""
    builder.saw_time(state.get("creationDate"))
    for request in state.get("requests") or ():
        _on_request(builder, request)
    return builder


def list_sessions(user_dir: Path, scope: Path | None, resources: ExitStack) -> Listing:
    """The chat sessions of every workspace of one VS Code user folder that may be ours."""
    for storage in _storages(user_dir):
        if isinstance(storage, Unreadable):
            yield storage
            continue
        folder = workspace_folder(storage)
        if scope is not None and (folder is None or not may_be_in_scope(folder, scope)):
            continue
        listed = entries(storage / "chatSessions")
        files: list[Path | Unreadable] = (
            [listed]
            if isinstance(listed, Unreadable)
            else [p for p in listed if p.suffix == ".jsonl"]
        )
        yield from file_refs(SourceKind.COPILOT, files, read_session, cwd=folder)
