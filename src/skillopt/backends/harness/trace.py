"""Step traces of a rollout and the short trace summary the optimizer reads.

Codex ``--json`` and Copilot JSONL events become numbered :class:`Step` records (user,
assistant, exec, tool). :func:`render_steps` draws them as a compact numbered list under a
character budget for the reflect prompt; ``upto`` cuts the trace after step N.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from skillopt.backends.cli.common import parse_json_lines

__all__ = [
    "AnswerFormat",
    "ReadStatus",
    "Step",
    "StepKind",
    "TraceSummary",
    "answer_format",
    "cut_raw_trace",
    "exec_errors",
    "parse_steps",
    "read_status",
    "render_steps",
    "settings_seen",
]


class StepKind(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    EXEC = "exec"
    TOOL = "tool"


class ReadStatus(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"


class AnswerFormat(StrEnum):
    TAGGED = "well_formed_tagged"
    TAGGED_NOT_LABEL = "tagged_not_a_label"
    PLAIN = "plain_text"
    MISSING = "missing"


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    index: int
    kind: StepKind
    text: str  # message text or command line
    status: str = ""  # exec/tool: "ok", "exit 2", "failed"
    output: str = ""
    line: int = -1  # stdout line the step came from (-1: not from the stream)


def parse_steps(stdout: str, prompt: str = "") -> list[Step]:
    """Numbered steps from a CLI's JSON event stream (codex, claude, copilot); [] when none."""
    raw: list[list[str]] = []  # [kind, text, status, output]
    by_tool_id: dict[str, list[str]] = {}
    lines: list[int] = []  # source line of each raw step
    if prompt:
        raw.append([StepKind.USER, prompt, "", ""])
        lines.append(-1)
    for lineno, event in _events(stdout):
        etype = event.get("type")
        if etype == "item.completed":
            raw.extend(list(step) for step in _codex_item(_obj(event.get("item"))))
        elif etype == "assistant" and isinstance(event.get("message"), dict):
            for block in _blocks(event["message"]):
                if block.get("type") == "text" and str(block.get("text") or "").strip():
                    raw.append([StepKind.ASSISTANT, str(block["text"]), "", ""])
                elif block.get("type") == "tool_use":
                    used = _claude_tool_use(block)
                    raw.append(used)
                    by_tool_id[str(block.get("id"))] = used
        elif etype == "user" and isinstance(event.get("message"), dict):
            for block in _blocks(event["message"]):
                pending = by_tool_id.get(str(block.get("tool_use_id")))
                if block.get("type") == "tool_result" and pending is not None:
                    pending[2], pending[3] = _claude_tool_result(block)
        elif etype == "assistant.message":
            content = _obj(event.get("data")).get("content")
            if isinstance(content, str) and content.strip():
                raw.append([StepKind.ASSISTANT, content, "", ""])
        elif etype == "tool.execution_complete":
            data = _obj(event.get("data"))
            name = str(data.get("toolName") or data.get("name") or "tool")
            ok = data.get("success")
            raw.append([StepKind.TOOL, name, "ok" if ok is not False else "failed", ""])
        lines += [lineno] * (len(raw) - len(lines))
    return [
        Step(index=i, kind=StepKind(kind), text=text, status=status, output=output, line=line)
        for i, ((kind, text, status, output), line) in enumerate(zip(raw, lines, strict=True), 1)
    ]


def _events(stdout: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, event) for every JSON object line of the stream."""
    out: list[tuple[int, dict[str, Any]]] = []
    for lineno, line in enumerate(stdout.splitlines()):
        events = parse_json_lines(line)
        if events:
            out.append((lineno, events[0]))
    return out


def cut_raw_trace(stdout: str, steps: list[Step], after: int) -> str:
    """The raw event stream up to and including the line that produced step ``after``."""
    kept = [s.line for s in steps if s.index <= after and s.line >= 0]
    if not kept:
        return ""
    return "\n".join(stdout.splitlines()[: max(kept) + 1]) + "\n"


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _claude_tool_use(block: dict[str, Any]) -> list[str]:
    name = str(block.get("name") or "tool")
    args = _obj(block.get("input"))
    if name == "Bash":
        return [StepKind.EXEC, str(args.get("command") or ""), "", ""]
    target = args.get("file_path") or args.get("path") or args.get("pattern") or ""
    return [StepKind.TOOL, f"{name} {target}".strip(), "", ""]


def _claude_tool_result(block: dict[str, Any]) -> tuple[str, str]:
    content = block.get("content")
    if isinstance(content, list):
        content = "\n".join(str(_obj(c).get("text") or "") for c in content)
    text = str(content or "")
    if not block.get("is_error"):
        return "ok", text
    code = re.match(r"Exit code (\d+)", text)
    return (f"exit {code.group(1)}" if code else "failed"), text


_SHELL_WRAP = re.compile(r"^(?:/usr)?(?:/bin/)?(?:ba|z)?sh -l?c '(.*)'$", re.DOTALL)


def _unwrap_shell(command: str) -> str:
    """``/bin/bash -lc 'cat task.md'`` -> ``cat task.md`` (codex wraps every command)."""
    match = _SHELL_WRAP.match(command.strip())
    return match.group(1).replace("'\\''", "'") if match else command


def _codex_item(item: dict[str, Any]) -> list[tuple[StepKind, str, str, str]]:
    itype = item.get("type")
    if itype == "agent_message" and isinstance(item.get("text"), str):
        return [(StepKind.ASSISTANT, item["text"], "", "")]
    if itype == "command_execution":
        code = item.get("exit_code")
        status = "ok" if code == 0 else (f"exit {code}" if code is not None else "failed")
        if item.get("status") == "declined":
            status = "declined"
        return [
            (
                StepKind.EXEC,
                _unwrap_shell(str(item.get("command") or "")),
                status,
                str(item.get("aggregated_output") or ""),
            )
        ]
    if itype == "mcp_tool_call":
        ok = item.get("status") == "completed"
        return [(StepKind.TOOL, str(item.get("tool") or "tool"), "ok" if ok else "failed", "")]
    return []  # reasoning, error notices, todo lists: not steps


def render_steps(steps: list[Step], *, budget: int = 4000, upto: int | None = None) -> str:
    """A compact numbered list (command + status for exec steps), cut to ``budget`` chars."""
    lines: list[str] = []
    used = 0
    shown = [s for s in steps if upto is None or s.index <= upto]
    for step in shown:
        text = " ".join(step.text.split())
        if len(text) > 200:
            text = text[:197] + "..."
        if step.kind in (StepKind.EXEC, StepKind.TOOL):
            line = f"{step.index}. [{step.kind}] {text} -> {step.status or 'unknown'}"
        else:
            line = f"{step.index}. [{step.kind}] {text}"
        if used + len(line) + 1 > budget:
            lines.append(f"... ({len(shown) - len(lines)} more steps cut)")
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)


def read_status(steps: list[Step], filename: str) -> ReadStatus:
    """Whether an exec step touching ``filename`` succeeded, failed, or no evidence exists."""
    touching = [s for s in steps if s.kind in (StepKind.EXEC, StepKind.TOOL) and filename in s.text]
    if not touching:
        return ReadStatus.UNKNOWN
    return ReadStatus.SUCCEEDED if any(s.status == "ok" for s in touching) else ReadStatus.FAILED


def answer_format(
    text: str, *, tag: str = "answer", label_pattern: str | None = None
) -> tuple[AnswerFormat, str]:
    """Classify the answer's shape and return the label inside the tags (or "")."""
    if not text.strip():
        return AnswerFormat.MISSING, ""
    match = re.search(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, re.DOTALL)
    if match is None:
        return AnswerFormat.PLAIN, ""
    label = match.group(1).strip()
    if label_pattern is not None and not re.fullmatch(label_pattern, label):
        return AnswerFormat.TAGGED_NOT_LABEL, label
    return AnswerFormat.TAGGED, label


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceSummary:
    cli: str
    sandbox: str
    reasoning: str
    task_read: ReadStatus
    skill_read: ReadStatus
    exec_errors: tuple[str, ...]
    answer_format: AnswerFormat
    answer_label: str
    attempts: int
    prompt_tokens: int | None
    completion_tokens: int | None
    parse_error: str = ""

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["exec_errors"] = list(self.exec_errors)
        return data


def settings_seen(argv: tuple[str, ...]) -> tuple[str, str]:
    """(sandbox, reasoning effort) as passed on the command line; "" when not set."""
    sandbox = reasoning = ""
    for flag, value in itertools.pairwise(argv):
        if flag == "--sandbox":
            sandbox = value
        elif flag == "-c" and value.startswith("model_reasoning_effort="):
            reasoning = value.split("=", 1)[1]
        elif flag in ("--effort", "--reasoning-effort"):
            reasoning = value
    return sandbox, reasoning


def exec_errors(steps: list[Step], limit: int = 3) -> tuple[str, ...]:
    failed = [s for s in steps if s.kind in (StepKind.EXEC, StepKind.TOOL) and s.status != "ok"]
    return tuple(f"step {s.index}: {' '.join(s.text.split())[:160]} -> {s.status}" for s in failed)[
        :limit
    ]


def _obj(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
