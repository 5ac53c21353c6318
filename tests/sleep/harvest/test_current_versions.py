"""Claude Code 2.1 and Codex 0.169 as they write sessions today (lines shaped like the ones
the real CLIs wrote in tests/sleep/harvest/test_real_agents.py), and the task identity of a
request asked once with a secret and once without."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from skillopt.redact import sanitize
from skillopt_sleep.harvest import SourceKind, SourceSpec, harvest
from skillopt_sleep.mining.heuristic import heuristic_mine, normalise_intent, stable_id
from support.agent_sessions import jsonl
from support.transcripts import Turn, write_claude_session

SID = "11cbe483-2523-4219-8864-1b760041e892"


def _claude_line(kind: str, stamp: str, cwd: Path, **more: object) -> dict[str, object]:
    return {
        "type": kind,
        "timestamp": stamp,
        "sessionId": SID,
        "cwd": str(cwd),
        "version": "2.1.332",
        "gitBranch": "HEAD",
        "isSidechain": False,
        **more,
    }


def test_claude_code_2_1_records_that_are_not_turns(tmp_path: Path) -> None:
    project, home = tmp_path / "proj", tmp_path / "claude"
    prompt = "Write a release note for version 2.0"
    reminder = {"type": "text", "text": "<system-reminder>\nAttribution...\n</system-reminder>"}
    lines = [
        {
            "type": "queue-operation",
            "operation": "enqueue",
            "timestamp": "2026-11-26T03:45:12Z",
            "sessionId": SID,
            "content": prompt + "\n",
        },
        _claude_line(
            "user",
            "2026-11-26T03:45:13Z",
            project,
            message={"role": "user", "content": prompt + "\n"},
        ),
        _claude_line(
            "attachment",
            "2026-11-26T03:45:13Z",
            project,
            renderedRole="user",
            attachment={"type": "prompt_snapshot", "systemPrompt": ["You are..."]},
        ),
        {
            "type": "api-request-blob",
            "sessionId": SID,
            "hash": "5d47",
            "message": {"role": "user", "content": [reminder, {"type": "text", "text": prompt}]},
        },
        {
            "type": "api-request-blob",
            "sessionId": SID,
            "hash": "51e1",
            "message": {"role": "system", "content": [{"type": "text", "text": "# Environment"}]},
        },
        {
            "type": "api-request",
            "sessionId": SID,
            "id": "6c53",
            "timestamp": "2026-11-26T03:45:13Z",
            "params": {"model": "m"},
            "tail": ["5d47", "51e1"],
        },
        _claude_line(
            "assistant",
            "2026-11-26T03:45:14Z",
            project,
            message={
                "role": "assistant",
                "content": [{"type": "text", "text": "Here is the note"}],
            },
        ),
        {"type": "last-prompt", "lastPrompt": prompt, "leafUuid": "e0d5", "sessionId": SID},
        {"type": "cost-state", "sessionId": SID, "totalCostUSD": 0.0001},
        {
            "type": "queue-operation",
            "operation": "enqueue",
            "timestamp": "2026-11-26T03:45:15Z",
            "sessionId": SID,
            "content": "No, make it shorter please\n",
        },
        _claude_line(
            "user",
            "2026-11-26T03:45:16Z",
            project,
            message={"role": "user", "content": "No, make it shorter please\n"},
        ),
        _claude_line(
            "assistant",
            "2026-11-26T03:45:17Z",
            project,
            message={"role": "assistant", "content": [{"type": "text", "text": "Shorter note"}]},
        ),
        {"type": "last-prompt", "lastPrompt": "No, make it shorter please", "sessionId": SID},
        {"type": "mode", "mode": "normal", "sessionId": SID},
    ]
    jsonl(home / "projects" / "-proj" / f"{SID}.jsonl", lines)
    spec = SourceSpec(kind=SourceKind.CLAUDE_CODE, home=home)
    (digest,) = harvest([spec], since=None, project=project, limit=5).digests
    assert digest.user_intents == (prompt, "No, make it shorter please")
    assert digest.assistant_finals == ("Here is the note", "Shorter note")
    assert digest.git_branch == ""  # "HEAD" is not a branch
    assert digest.n_user_turns == 2


def _codex_line(kind: str, payload: dict[str, object]) -> dict[str, object]:
    return {"timestamp": "2026-11-26T03:45:22.910Z", "type": kind, "payload": payload}


def _item(kind: str, text: str) -> dict[str, object]:
    block_type = "text" if kind == "UserMessage" else "Text"
    item = {"type": kind, "id": "i", "content": [{"type": block_type, "text": text}]}
    return _codex_line("event_msg", {"type": "item_completed", "thread_id": "t", "item": item})


def _message(role: str, text: str) -> dict[str, object]:
    block = "output_text" if role == "assistant" else "input_text"
    return _codex_line(
        "response_item",
        {"type": "message", "role": role, "content": [{"type": block, "text": text}]},
    )


def test_codex_0_169_item_completed_and_developer_messages(tmp_path: Path) -> None:
    project, home = tmp_path / "proj", tmp_path / "codex"
    skills = "<skills_instructions>\n## Skills\n- release-notes: ...\n</skills_instructions>"
    lines = [
        _codex_line(
            "session_meta",
            {
                "id": "01a2",
                "cwd": str(project),
                "cli_version": "0.169.0",
                "originator": "codex_exec",
            },
        ),
        _message("developer", skills),
        _message("user", f"<environment_context>\n  <cwd>{project}</cwd>\n</environment_context>"),
        _message("user", "Summarise the changelog\n"),
        _item("UserMessage", "Summarise the changelog\n"),
        _codex_line(
            "response_item",
            {
                "type": "function_call",
                "name": "exec_command",
                "arguments": json.dumps({"cmd": "cat .agents/skills/release-notes/SKILL.md"}),
            },
        ),
        _item("AgentMessage", "Summary done"),
        _message("assistant", "Summary done"),
        _message("user", "thanks, now also list the authors\n"),
        _item("UserMessage", "thanks, now also list the authors\n"),
        _item("AgentMessage", "Authors listed"),
        _message("assistant", "Authors listed"),
    ]
    jsonl(home / "sessions" / "2026" / "11" / "26" / "rollout-x-01a2.jsonl", lines)
    spec = SourceSpec(kind=SourceKind.CODEX, home=home)
    (digest,) = harvest([spec], since=None, project=project, limit=5).digests
    assert digest.user_intents == ("Summarise the changelog", "thanks, now also list the authors")
    assert digest.assistant_finals == ("Summary done", "Authors listed")
    assert digest.n_assistant_turns == 2
    assert digest.skill_hint == "release-notes"


def test_codex_item_completed_alone_is_enough(tmp_path: Path) -> None:
    project, home = tmp_path / "proj", tmp_path / "codex"
    lines = [
        _codex_line("session_meta", {"id": "01a3", "cwd": str(project)}),
        _item("UserMessage", "Rename the config keys"),
        _item("AgentMessage", "Renamed."),
    ]
    jsonl(home / "archived_sessions" / "rollout-y-01a3.jsonl", lines)
    spec = SourceSpec(kind=SourceKind.CODEX, home=home)
    (digest,) = harvest([spec], since=None, project=project, limit=5).digests
    assert (digest.user_intents, digest.assistant_finals) == (
        ("Rename the config keys",),
        ("Renamed.",),
    )


def test_a_secret_pasted_once_does_not_make_another_task(tmp_path: Path) -> None:
    project, home = tmp_path / "proj", tmp_path / "claude"
    ask = "Summarise the changelog for the release"
    secret = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0" * 2
    start = datetime(2026, 11, 20, 8, tzinfo=UTC)
    for n, user in enumerate([ask, f"{ask} token={secret}", f"{ask} {secret}", ask + "."]):
        write_claude_session(
            home, cwd=project, start=start, session_id=f"s{n}", turns=[Turn(user=user)]
        )
    spec = SourceSpec(kind=SourceKind.CLAUDE_CODE, home=home)
    digests = harvest([spec], since=None, project=project, limit=10).digests
    (task,) = heuristic_mine(digests, project=str(project)).tasks
    assert len(task.source_sessions) == 4
    assert secret not in task.intent and "[REDACTED" not in task.intent
    assert normalise_intent(sanitize(f"{ask} API_KEY='{secret}'")) == normalise_intent(ask)
    assert stable_id("h", sanitize(f"{ask} {secret}")) == stable_id("h", ask)
