"""Cursor agent transcripts: ``<cursor_home>/projects/<slug>/agent-transcripts/**/*.jsonl``.

Each line is a turn, ``{"role", "message": {"content": [blocks]}}`` (the role may also sit
inside ``message``), with Claude-style blocks: ``text``, ``tool_use`` (``name``, ``input``)
and ``tool_result``; the user's own words are inside ``<user_query>...</user_query>`` (the
rest of a user turn is context Cursor attached). A ``{"type": "turn_ended", "status":
"error"}`` line marks a turn that failed (counted as negative feedback). Lines carry no
timestamps: a session's time is its file's modification time.

The project: ``<slug>/.workspace-trusted`` names it (``workspacePath``) when present; else
the slug is the project path with every run of non-alphanumerics replaced by ``-``, which
is lossy, so it is matched against the project being harvested (the project itself, or one
of its existing subdirectories found by walking down) and never guessed otherwise.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

from skillopt_sleep.harvest.common import SessionBuilder
from skillopt_sleep.harvest.digest import FeedbackSignal, Sentiment, SourceKind
from skillopt_sleep.harvest.lines import iter_json_objects
from skillopt_sleep.harvest.refs import (
    Listing,
    ReadOptions,
    Unreadable,
    file_refs,
    may_be_in_scope,
)
from skillopt_sleep.harvest.skillhint import skill_in_text
from skillopt_sleep.harvest.walk import files_below, subfolders

__all__ = ["TRANSCRIPTS", "TRUST_FILE", "list_sessions", "project_of", "read_session", "slug"]

TRANSCRIPTS = "agent-transcripts"
TRUST_FILE = ".workspace-trusted"
_NON_ALNUM = re.compile(r"[^A-Za-z0-9]+")
_USER_QUERY = re.compile(r"<user_query>\s*(.*?)\s*</user_query>", re.DOTALL)
_TRUST_MAX_BYTES = 64 * 1024
_MAX_DEPTH = 8


def slug(path: str | os.PathLike[str]) -> str:
    """Cursor's folder name for a project path (case-folded for comparison)."""
    return _NON_ALNUM.sub("-", str(path)).strip("-").casefold()


def _trusted_path(project_dir: Path) -> str | None:
    try:
        with open(project_dir / TRUST_FILE, "rb") as handle:
            data = json.loads(handle.read(_TRUST_MAX_BYTES))
    except (OSError, ValueError):
        return None
    value = data.get("workspacePath") if isinstance(data, dict) else None
    return value if isinstance(value, str) and value else None


def _descend(folder: Path, rest: str, depth: int) -> Path | None:
    """The existing subdirectory of ``folder`` whose slug continues with ``rest``."""
    if not rest:
        return folder
    if depth >= _MAX_DEPTH:
        return None
    children = subfolders(folder)
    if isinstance(children, Unreadable):
        return None
    for child in children:
        name = slug(child.name)
        if name and (rest == name or rest.startswith(name + "-")):
            found = _descend(child, rest[len(name) :].lstrip("-"), depth + 1)
            if found is not None:
                return found
    return None


def project_of(project_dir: Path, scope: Path | None) -> str | None:
    """The working directory of a Cursor project folder, or ``None`` when unknown."""
    trusted = _trusted_path(project_dir)
    if trusted is not None:
        return trusted
    if scope is None:
        return None
    mine, theirs = slug(scope), project_dir.name.casefold()
    if theirs == mine:
        return str(scope)
    if theirs.startswith(mine + "-"):
        found = _descend(scope, theirs[len(mine) + 1 :], 0)
        return str(found) if found is not None else None
    return None


def _user_text(text: str) -> str:
    found = _USER_QUERY.findall(text)
    return "\n".join(found) if found else text


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _on_assistant(builder: SessionBuilder, blocks: list[dict[str, Any]]) -> None:
    texts = []
    for block in blocks:
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use" and isinstance(block.get("name"), str):
            builder.add_tool(block["name"])
            if skill := skill_in_text(json.dumps(block.get("input"))):
                builder.add_skill(skill)
    builder.add_assistant_text("\n".join(texts))


def read_session(path: Path, options: ReadOptions, *, cwd: str = "") -> SessionBuilder:
    markers = options.self_markers
    builder = SessionBuilder(source=SourceKind.CURSOR, path=path, self_markers=markers)
    builder.session_id, builder.cwd = path.stem, cwd
    for line in iter_json_objects(path, options.tally, max_line_bytes=options.max_line_bytes):
        if line.get("type") == "turn_ended":
            if line.get("status") == "error" and builder.n_user:
                signal = FeedbackSignal(
                    sentiment=Sentiment.NEGATIVE, cue="turn_error", turn=builder.n_user - 1
                )
                builder.feedback.append(signal)
            continue
        message = line.get("message")
        role = line.get("role") or (message.get("role") if isinstance(message, dict) else None)
        blocks = _blocks(message)
        if role == "user":
            for block in blocks:
                if block.get("type") == "text" and isinstance(block.get("text"), str):
                    builder.add_user_text(_user_text(block["text"]))
        elif role == "assistant":
            _on_assistant(builder, blocks)
    return builder


def list_sessions(home: Path, scope: Path | None, resources: ExitStack) -> Listing:
    """Transcripts of the Cursor projects that may be ours (all of them for ``scope=None``)."""
    projects = subfolders(home / "projects")
    if isinstance(projects, Unreadable):
        yield projects
        return
    for project_dir in projects:
        transcripts = project_dir / TRANSCRIPTS
        if not transcripts.is_dir():
            continue
        cwd = project_of(project_dir, scope)
        if scope is not None and (cwd is None or not may_be_in_scope(cwd, scope)):
            continue
        files = files_below(transcripts, ".jsonl")
        yield from file_refs(
            SourceKind.CURSOR, files, partial(read_session, cwd=cwd or ""), cwd=cwd
        )
