"""Write realistic Claude Code and Codex transcript trees into a temp home, for tests."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Turn:
    """One exchange: what the user typed, what the agent answered, tools it used."""

    user: str
    answer: str = "Done."
    tools: Sequence[str] = ()


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _set_mtime(path: Path, moment: datetime) -> None:
    stamp = moment.timestamp()
    os.utime(path, (stamp, stamp))


def write_claude_session(
    home: Path,
    *,
    cwd: Path | str,
    turns: Sequence[Turn],
    start: datetime,
    session_id: str | None = None,
    branch: str = "main",
    skill: str = "",
    extra_lines: Sequence[str] = (),
    step: timedelta = timedelta(minutes=1),
) -> Path:
    """A Claude Code ``projects/<slug>/<id>.jsonl``; returns the file path."""
    sid = session_id or str(uuid.uuid4())
    slug = str(cwd).replace("/", "-")
    path = home / "projects" / slug / f"{sid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    now = start
    lines: list[str] = [json.dumps({"type": "summary", "summary": "x", "leafUuid": "l"})]
    base: dict[str, Any] = {"cwd": str(cwd), "sessionId": sid, "gitBranch": branch}
    for turn in turns:
        user = {"type": "user", "timestamp": _iso(now), "isSidechain": False}
        user["message"] = {"role": "user", "content": turn.user}
        lines.append(json.dumps({**base, **user}))
        now += step
        blocks: list[dict[str, Any]] = []
        for tool in turn.tools:
            blocks.append({"type": "tool_use", "id": "t", "name": tool, "input": {}})
        if skill:
            blocks.append(
                {"type": "tool_use", "id": "s", "name": "Skill", "input": {"skill": skill}}
            )
        blocks.append({"type": "text", "text": turn.answer})
        msg = {"type": "assistant", "timestamp": _iso(now)}
        msg["message"] = {"role": "assistant", "content": blocks}
        lines.append(json.dumps({**base, **msg}))
        result = {"type": "user", "timestamp": _iso(now)}
        result["message"] = {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}],
        }
        lines.append(json.dumps({**base, **result}))
        now += step
    lines.extend(extra_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _set_mtime(path, now)
    return path


def write_codex_session(
    home: Path,
    *,
    cwd: Path | str,
    turns: Sequence[Turn],
    start: datetime,
    session_id: str | None = None,
    archived: bool = False,
    extra_lines: Sequence[str] = (),
    step: timedelta = timedelta(minutes=1),
) -> Path:
    """A Codex rollout file in ``sessions/YYYY/MM/DD`` (or ``archived_sessions``)."""
    sid = session_id or str(uuid.uuid4())
    stamp = start.astimezone(UTC)
    name = f"rollout-{stamp:%Y-%m-%dT%H-%M-%S}-{sid}.jsonl"
    if archived:
        path = home / "archived_sessions" / name
    else:
        path = home / "sessions" / f"{stamp:%Y}" / f"{stamp:%m}" / f"{stamp:%d}" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    now = start

    def line(kind: str, payload: dict[str, Any]) -> str:
        return json.dumps({"timestamp": _iso(now), "type": kind, "payload": payload})

    meta = {"id": sid, "timestamp": _iso(now), "cwd": str(cwd), "originator": "codex_cli_rs"}
    lines = [line("session_meta", {**meta, "git": {"branch": "main"}})]
    env = f"<environment_context>\n  <cwd>{cwd}</cwd>\n</environment_context>"
    lines.append(
        line(
            "response_item",
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": env}]},
        )
    )
    for turn in turns:
        user_item = {"type": "input_text", "text": turn.user}
        lines.append(
            line("response_item", {"type": "message", "role": "user", "content": [user_item]})
        )
        lines.append(line("event_msg", {"type": "user_message", "message": turn.user}))
        lines.append(line("turn_context", {"cwd": str(cwd), "model": "gpt-x"}))
        now += step
        for tool in turn.tools:
            call = {"type": "function_call", "name": tool, "arguments": "{}", "call_id": "c"}
            lines.append(line("response_item", call))
        out = {"type": "output_text", "text": turn.answer}
        lines.append(
            line("response_item", {"type": "message", "role": "assistant", "content": [out]})
        )
        lines.append(line("event_msg", {"type": "agent_message", "message": turn.answer}))
        now += step
    lines.extend(extra_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _set_mtime(path, now)
    return path


def append_to_first_prompts(claude_home: Path, text: str) -> None:
    """Add ``text`` to the first user message of every Claude Code transcript under
    ``claude_home`` (to plant a secret where a night will read it)."""
    for transcript in (claude_home / "projects").rglob("*.jsonl"):
        lines = transcript.read_text().splitlines()
        first = json.loads(lines[0])
        first["message"]["content"] += f" {text}"
        lines[0] = json.dumps(first)
        transcript.write_text("\n".join(lines) + "\n")
