"""Pi coding agent sessions: ``<sessions folder>/<project>/<stamp>_<id>.jsonl``.

The sessions folder is ``~/.pi/agent/sessions`` unless the user moved it (see
:func:`~.locations.pi_session_dirs`); a moved one may hold the files directly, so every
``.jsonl`` below it is read and the header's ``cwd`` says whose project it is.

The first line is the header, ``{"type": "session", "version", "id", "timestamp", "cwd"}``
(no ``version`` means 1). Every later line is an entry; ``message`` entries carry a
``message`` with ``role`` ``user`` (``content``: a string or ``text`` blocks),
``assistant`` (``text``, ``thinking`` and ``toolCall`` blocks) or ``toolResult``
(``toolName``); other roles and entry types (``custom_message``, ``compaction``,
``branch_summary``, ``model_change``, ``label``, ...) are not the user's words.

Version 1 is a linear list. Versions 2 and 3 form a tree through ``id`` / ``parentId``:
going back to an earlier entry and going on from there starts a branch, and the newest
entry is on the branch the user went on with. Only that active branch, from the last entry
back to the root, is the session; abandoned branches are not read. A tree that is not a
tree (a parent that is not an earlier entry, a repeated id) makes the session unreadable.
Two passes keep memory small: the first keeps only ids to find the branch, the second
reads the branch's entries.
``/skill:name`` expands to a user message that opens with a ``<skill name="...">`` block:
that names the skill; the user's words follow the block. Sub-agent sessions
(``subagent-artifacts``) are not read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from skillopt.errors import DataError
from skillopt_sleep.harvest.common import SessionBuilder
from skillopt_sleep.harvest.digest import SourceKind
from skillopt_sleep.harvest.files import peek_cwd
from skillopt_sleep.harvest.lines import LineTally, iter_json_objects
from skillopt_sleep.harvest.refs import (
    Listing,
    ReadOptions,
    Unreadable,
    file_refs,
    may_be_in_scope,
)
from skillopt_sleep.harvest.skillhint import skill_in_text, split_skill_block
from skillopt_sleep.harvest.walk import files_below

__all__ = ["SUBAGENTS", "BrokenTree", "active_branch", "list_sessions", "read_session"]

SUBAGENTS = "subagent-artifacts"


class BrokenTree(DataError, ValueError):
    """The entries do not form a tree (the session cannot be read safely). A ValueError
    too, as every reader's "this file is not a session" is."""


def _tree_ids(record: dict[str, Any]) -> tuple[str, str | None] | None:
    if record.get("type") == "session":  # the header is not part of the tree
        return None
    entry_id, parent = record.get("id"), record.get("parentId")
    if not isinstance(entry_id, str) or not (parent is None or isinstance(parent, str)):
        return None
    return entry_id, parent


def active_branch(records: Iterator[dict[str, Any]]) -> set[str]:
    """The ids on the branch from the last entry back to the root.

    Only ids are kept (the first of two passes over the file), so memory stays small
    whatever the session's size. Raises :class:`BrokenTree` for a repeated id or a parent
    that is not an earlier entry (which also rules out cycles).
    """
    parents: dict[str, str | None] = {}
    last: str | None = None
    for record in records:
        ids = _tree_ids(record)
        if ids is None:
            continue
        entry_id, parent = ids
        if entry_id in parents:
            raise BrokenTree(f"entry {entry_id!r} appears twice")
        if parent is not None and parent not in parents:
            raise BrokenTree(f"entry {entry_id!r} names a parent {parent!r} that is not before it")
        parents[entry_id] = parent
        last = entry_id
    branch: set[str] = set()
    while last is not None:
        branch.add(last)
        last = parents[last]
    return branch


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        b["text"]
        for b in content
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]


def _on_message(builder: SessionBuilder, message: dict[str, Any]) -> None:
    role, content = message.get("role"), message.get("content")
    if role == "user":
        for text in _texts(content):
            skill, words = split_skill_block(text)
            if skill:
                builder.add_skill(skill)
            if words:
                builder.add_user_text(words)
    elif role == "assistant":
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "toolCall":
                if isinstance(block.get("name"), str):
                    builder.add_tool(block["name"])
                if skill := skill_in_text(json.dumps(block.get("arguments"))):
                    builder.add_skill(skill)
        builder.add_assistant_text("\n".join(_texts(content)))
    elif role == "toolResult" and isinstance(message.get("toolName"), str):
        builder.add_tool(message["toolName"])


def _header(path: Path, options: ReadOptions) -> tuple[dict[str, Any], bool]:
    """The header and whether the entries form a tree (versions 2 and 3)."""
    records = iter_json_objects(path, LineTally(), max_line_bytes=options.max_line_bytes)
    header = next(records, None)
    if header is None or header.get("type") != "session":
        raise ValueError("not a Pi session: the first line is not a session header")
    version = header.get("version", 1)
    return header, isinstance(version, int) and not isinstance(version, bool) and version >= 2


def read_session(path: Path, options: ReadOptions) -> SessionBuilder:
    builder = SessionBuilder(source=SourceKind.PI, path=path, self_markers=options.self_markers)
    header, tree = _header(path, options)
    builder.session_id = header["id"] if isinstance(header.get("id"), str) else path.stem
    builder.cwd = header["cwd"] if isinstance(header.get("cwd"), str) else ""
    builder.saw_time(header.get("timestamp"))
    branch: set[str] | None = None
    if tree:
        first_pass = iter_json_objects(path, LineTally(), max_line_bytes=options.max_line_bytes)
        branch = active_branch(first_pass)
    records = iter_json_objects(path, options.tally, max_line_bytes=options.max_line_bytes)
    next(records, None)  # the header
    for record in records:
        if branch is not None:
            ids = _tree_ids(record)
            if ids is None or ids[0] not in branch:
                continue
        builder.saw_time(record.get("timestamp"))
        message = record.get("message")
        if record.get("type") == "message" and isinstance(message, dict):
            _on_message(builder, message)
    return builder


def list_sessions(home: Path, scope: Path | None, resources: ExitStack) -> Listing:
    """The sessions below the sessions folder ``home`` that may be the project's."""
    files = files_below(home, ".jsonl", skip_folders=(SUBAGENTS,))
    for ref in file_refs(SourceKind.PI, files, read_session, cwd_of=peek_cwd):
        if isinstance(ref, Unreadable) or may_be_in_scope(ref.cwd, scope):
            yield ref
