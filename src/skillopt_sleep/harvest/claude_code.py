"""Claude Code transcripts: ``<claude_home>/projects/<slug>/<session>.jsonl``.

Each line is one event: ``type`` user/assistant (with ``message.role`` and
``message.content`` as a string or a list of blocks), plus ``timestamp``, ``cwd``,
``gitBranch`` and ``sessionId``. Sub-agent transcripts (``subagents/`` directories,
``agent-*.jsonl`` files, ``isSidechain`` lines), ``isMeta`` lines and the summaries Claude
Code writes when it compacts a conversation (``isCompactSummary``) are not the user's words.

Only ``user`` and ``assistant`` records are turns. Claude Code 2.1.x also writes records
that carry a ``message`` or a copy of the prompt but are not turns: ``api-request-blob``
(the request as sent, role ``user``: a system reminder plus the prompt again),
``queue-operation`` and ``last-prompt`` (copies of the prompt), ``attachment`` (context,
one holds the whole system prompt), ``api-request``, ``api-request-shape``, ``cost-state``
and ``mode``; they give times at most. Outside a git repository ``gitBranch`` is ``HEAD``,
which is not a branch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

from skillopt_sleep.harvest.common import SessionBuilder
from skillopt_sleep.harvest.digest import SourceKind
from skillopt_sleep.harvest.lines import visit_json_objects
from skillopt_sleep.harvest.refs import Listing, ReadOptions, Unreadable, file_refs
from skillopt_sleep.harvest.walk import files_below

__all__ = ["list_sessions", "read_session", "session_files"]

_TURNS = ("user", "assistant")
_NOT_A_BRANCH = "HEAD"  # a detached head, or no git repository at all


def session_files(claude_home: Path) -> Iterator[Path | Unreadable]:
    yield from files_below(
        claude_home / "projects",
        ".jsonl",
        skip_folders=("subagents",),
        skip_file=lambda name: name.startswith("agent-"),
    )


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _on_assistant(builder: SessionBuilder, blocks: list[dict[str, Any]]) -> None:
    texts: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use" and isinstance(block.get("name"), str):
            builder.add_tool(block["name"])
            tool_input = block.get("input")
            if block["name"] == "Skill" and isinstance(tool_input, dict):
                skill = tool_input.get("skill")
                if isinstance(skill, str):
                    builder.add_skill(skill)
    if texts:
        builder.add_assistant_text("\n".join(texts))


def _visit(builder: SessionBuilder, record: dict[str, Any]) -> None:
    if record.get("isSidechain") is True:
        return
    builder.saw_time(record.get("timestamp"))
    if not builder.session_id and isinstance(record.get("sessionId"), str):
        builder.session_id = record["sessionId"]
    builder.saw_cwd(record.get("cwd"))
    branch = record.get("gitBranch")
    if not builder.git_branch and isinstance(branch, str) and branch != _NOT_A_BRANCH:
        builder.git_branch = branch
    message = record.get("message")
    if record.get("type") not in _TURNS:
        return  # api-request-blob, queue-operation, last-prompt, attachment, ... are not turns
    if record.get("isMeta") is True or record.get("isCompactSummary") is True:
        return
    if not isinstance(message, dict):
        return
    role = message.get("role") or record.get("type")
    blocks = _blocks(message.get("content"))
    if role == "user":
        for block in blocks:
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                builder.add_user_text(block["text"])
    elif role == "assistant":
        _on_assistant(builder, blocks)


def read_session(path: Path, options: ReadOptions) -> SessionBuilder:
    builder = SessionBuilder(
        source=SourceKind.CLAUDE_CODE, path=path, self_markers=options.self_markers
    )
    visit_json_objects(
        path, options.tally, partial(_visit, builder), max_line_bytes=options.max_line_bytes
    )
    return builder


def list_sessions(home: Path, scope: Path | None, resources: ExitStack) -> Listing:
    return file_refs(SourceKind.CLAUDE_CODE, session_files(home), read_session)
