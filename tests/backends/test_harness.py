"""Exec harness: workspace, prompt, structured answers, retries, transcripts, step traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt.backends.cli.common import CliKind, CliSpec, ParsedReply
from skillopt.backends.cli.member import CliBackend
from skillopt.backends.harness.rollout import HarnessOptions, extract_answer, run_rollout
from skillopt.backends.harness.trace import (
    AnswerFormat,
    ReadStatus,
    StepKind,
    answer_format,
    cut_raw_trace,
    parse_steps,
    read_status,
    render_steps,
)
from skillopt.backends.harness.workspace import (
    NO_GUIDANCE,
    SkillFile,
    WorkspaceSpec,
    build_prompt,
    build_workspace,
    render_skill_md,
)
from skillopt.errors import BackendAuthError, DataError
from support.fake_cli import write_fake_cli

SKILL = SkillFile(name="triage", description="Label bug reports", body="Prefer the `bug` label.")
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent-home"}


def codex_stdout(*items: dict[str, object], text: str = "") -> str:
    events: list[dict[str, object]] = [{"type": "thread.started"}, {"type": "turn.started"}]
    events += [{"type": "item.completed", "item": item} for item in items]
    if text:
        events.append({"type": "item.completed", "item": {"type": "agent_message", "text": text}})
    events.append({"type": "turn.completed", "usage": {"input_tokens": 50, "output_tokens": 7}})
    return "".join(json.dumps(e) + "\n" for e in events)


def backend_for(path: Path, kind: CliKind = CliKind.CODEX) -> CliBackend:
    return CliBackend(CliSpec(kind=kind, name="h", executable=str(path)), environ=ENV)


# -------------------------------------------------------------------------------- workspace
def test_skill_md_has_front_matter_and_guidance() -> None:
    text = render_skill_md(SKILL)
    assert text.startswith('---\nname: triage\ndescription: "Label bug reports"\n---\n')
    assert "# triage" in text and "## Dynamic guidance\n\nPrefer the `bug` label." in text
    empty = render_skill_md(SkillFile(name="triage", description="d", body="  ", preamble="Fixed."))
    assert NO_GUIDANCE in empty and "Fixed." in empty
    with pytest.raises(DataError):
        render_skill_md(SkillFile(name="Bad Name", description="d", body=""))


def test_workspace_layout(tmp_path: Path) -> None:
    doc = tmp_path / "report.pdf"
    doc.write_bytes(b"%PDF")
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    spec = WorkspaceSpec(
        skill=SKILL,
        task="Label this issue.",
        files={"notes/hint.txt": "hi"},
        data_dirs={"train": data},
        attachments=(doc,),
    )
    root = build_workspace(tmp_path / "ws", spec)
    assert (root / ".agents/skills/triage/SKILL.md").read_text() == render_skill_md(SKILL)
    assert (root / ".claude/skills/triage/SKILL.md").is_file()
    assert (root / "task.md").read_text() == "Label this issue.\n"
    assert (root / "notes/hint.txt").read_text() == "hi"
    assert (root / "train").is_symlink() and (root / "train").resolve() == data
    assert (root / "attachments/01-report.pdf").read_bytes() == b"%PDF"
    assert "attachments/01-report.pdf" in (root / "ATTACHMENTS.md").read_text()


def test_workspace_refuses_missing_attachments_and_denied_data(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="missing attachment"):
        build_workspace(
            tmp_path / "a", WorkspaceSpec(skill=SKILL, task="t", attachments=(tmp_path / "x",))
        )
    assert not (tmp_path / "a").exists()  # nothing was written
    held_out = tmp_path / "splits" / "test"
    held_out.mkdir(parents=True)
    sneaky = tmp_path / "innocent"
    sneaky.symlink_to(held_out)
    for source in (held_out, sneaky):
        with pytest.raises(DataError, match="held-out"):
            build_workspace(
                tmp_path / "b",
                WorkspaceSpec(
                    skill=SKILL,
                    task="t",
                    data_dirs={"d": source},
                    denied_names=frozenset({"test", "val"}),
                ),
            )
    with pytest.raises(DataError, match="relative"):
        build_workspace(tmp_path / "c", WorkspaceSpec(skill=SKILL, task="t", files={"../x": "y"}))


def test_prompt_wording() -> None:
    plain = build_prompt(WorkspaceSpec(skill=SKILL, task="t"))
    assert "task.md" in plain and ".agents/skills/triage/SKILL.md" in plain
    assert "Do not modify" in plain and "ATTACHMENTS.md" not in plain
    assert "IMPORTANT" not in plain
    writable = build_prompt(
        WorkspaceSpec(skill=SKILL, task="t", writable=True, attachments=(Path("a"),)), retry=True
    )
    assert "may create or modify" in writable and "ATTACHMENTS.md" in writable
    assert "IMPORTANT" in writable


# ----------------------------------------------------------------------------------- answers
@pytest.mark.parametrize(
    ("reply", "structured", "expected"),
    [
        (ParsedReply(text="x", structured={"final_response": "<a>B</a>"}), True, ("<a>B</a>", "")),
        (
            ParsedReply(text="x", structured={"final_response": " ", "final_answer": "B"}),
            True,
            ("<a>B</a>", ""),
        ),
        (ParsedReply(text='{"final_answer": "C"}'), True, ("<a>C</a>", "")),
        (ParsedReply(text="plain"), True, ("plain", "")),
        (ParsedReply(text="plain"), False, ("plain", "")),
    ],
)
def test_extract_answer(reply: ParsedReply, structured: bool, expected: tuple[str, str]) -> None:
    assert extract_answer(reply, tag="a", structured=structured) == expected


def test_extract_answer_reports_an_empty_structure() -> None:
    answer, error = extract_answer(
        ParsedReply(text="", structured={"final_response": ""}), tag="a", structured=True
    )
    assert answer == "" and "neither" in error


@pytest.mark.parametrize(
    ("text", "pattern", "expected"),
    [
        ("<answer>bug</answer>", r"bug|feature", (AnswerFormat.TAGGED, "bug")),
        ("<answer>maybe</answer>", r"bug|feature", (AnswerFormat.TAGGED_NOT_LABEL, "maybe")),
        ("it is a bug", None, (AnswerFormat.PLAIN, "")),
        ("  ", None, (AnswerFormat.MISSING, "")),
    ],
)
def test_answer_format(text: str, pattern: str | None, expected: tuple[AnswerFormat, str]) -> None:
    assert answer_format(text, label_pattern=pattern) == expected


# ------------------------------------------------------------------------------------ traces
def test_steps_parse_render_and_cut() -> None:
    stdout = codex_stdout(
        {"type": "reasoning", "text": "thinking"},
        {
            "type": "command_execution",
            "command": "/bin/bash -lc 'cat task.md'",
            "exit_code": 0,
            "status": "completed",
        },
        {"type": "command_execution", "command": "cat SKILL.md", "exit_code": 1},
        {"type": "error", "message": "metadata notice"},
        text="<answer>bug</answer>",
    )
    steps = parse_steps(stdout, prompt="do it")
    assert [s.kind for s in steps] == [
        StepKind.USER,
        StepKind.EXEC,
        StepKind.EXEC,
        StepKind.ASSISTANT,
    ]
    assert read_status(steps, "task.md") is ReadStatus.SUCCEEDED
    assert read_status(steps, "SKILL.md") is ReadStatus.FAILED
    assert read_status(steps, "other.md") is ReadStatus.UNKNOWN
    full = render_steps(steps)
    assert "2. [exec] cat task.md -> ok" in full and "3. [exec] cat SKILL.md -> exit 1" in full
    assert "4. [assistant]" not in render_steps(steps, upto=3)
    tight = render_steps(steps, budget=40)
    assert len(tight) < 80 and "more steps cut" in tight
    cut = cut_raw_trace(stdout, steps, after=2)
    assert "cat task.md" in cut and "SKILL.md" not in cut and cut.endswith("}\n")
    assert cut_raw_trace(stdout, steps, after=1) == ""  # the prompt is not in the stream
    everything = stdout.splitlines(keepends=True)
    assert cut_raw_trace(stdout, steps, after=99) == "".join(everything[:-1])  # up to the answer


def test_claude_stream_steps() -> None:
    events = [
        {"type": "system", "subtype": "init"},
        {
            "type": "assistant",
            "message": {
                "content": [
                    {"type": "text", "text": "Reading."},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "Read",
                        "input": {"file_path": "/w/task.md"},
                    },
                    {
                        "type": "tool_use",
                        "id": "t2",
                        "name": "Bash",
                        "input": {"command": "cat SKILL.md"},
                    },
                ]
            },
        },
        {
            "type": "user",
            "message": {
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "the task"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "content": "Exit code 1\ncat: SKILL.md: No such file",
                        "is_error": True,
                    },
                ]
            },
        },
        {"type": "result", "is_error": False, "result": "done"},
    ]
    steps = parse_steps("".join(json.dumps(e) + "\n" for e in events))
    assert [(s.kind, s.status) for s in steps] == [
        (StepKind.ASSISTANT, ""),
        (StepKind.TOOL, "ok"),
        (StepKind.EXEC, "exit 1"),
    ]
    assert read_status(steps, "task.md") is ReadStatus.SUCCEEDED
    assert read_status(steps, "SKILL.md") is ReadStatus.FAILED


# ----------------------------------------------------------------------------------- rollout
async def test_rollout_with_structured_answer(tmp_path: Path) -> None:
    fake = write_fake_cli(
        tmp_path / "bin",
        "codex",
        stdout=codex_stdout(
            {"type": "command_execution", "command": "cat task.md", "exit_code": 0},
            {"type": "command_execution", "command": "rg foo", "exit_code": 2},
        ),
        last_message=json.dumps({"final_response": "", "final_answer": "bug"}),
    )
    spec = WorkspaceSpec(skill=SKILL, task="Label it.", tools=("search",))
    out = await run_rollout(
        backend_for(fake.path),
        spec,
        rollout_dir=tmp_path / "run" / "r1",
        options=HarnessOptions(label_pattern="bug|feature", keep_workspace=True),
    )
    assert out.answer == "<answer>bug</answer>" and out.label == "bug"
    assert out.summary.answer_format is AnswerFormat.TAGGED
    assert out.summary.task_read is ReadStatus.SUCCEEDED
    assert out.summary.skill_read is ReadStatus.UNKNOWN
    assert out.summary.sandbox == "workspace-write"
    assert out.summary.exec_errors and "rg foo" in out.summary.exec_errors[0]
    assert out.summary.prompt_tokens == 50
    call = fake.calls()[0]
    assert "--output-schema" in call["argv"]
    assert Path(call["cwd"]) == tmp_path / "run" / "r1" / "workspace"
    assert "tools/search" in call["stdin"] and "task.md" in call["stdin"]
    summary = json.loads((tmp_path / "run/r1/trace_summary.json").read_text())
    assert summary["answer_label"] == "bug" and summary["task_read"] == "succeeded"
    assert "=== attempt 1" in (tmp_path / "run/r1/transcript.txt").read_text()
    assert "[exec] cat task.md -> ok" in (tmp_path / "run/r1/steps.txt").read_text()


async def test_rollout_retries_an_empty_answer_with_a_reminder(tmp_path: Path) -> None:
    fake = write_fake_cli(
        tmp_path / "bin",
        "codex",
        stdout=codex_stdout(),
        last_messages=[
            json.dumps({"final_response": "", "final_answer": ""}),
            "<answer>x</answer>",
        ],
    )
    out = await run_rollout(
        backend_for(fake.path),
        WorkspaceSpec(skill=SKILL, task="t"),
        rollout_dir=tmp_path / "r",
        options=HarnessOptions(empty_retries=2),
    )
    assert out.attempts == 2 and out.answer == "<answer>x</answer>"
    first, second = fake.calls()
    assert "IMPORTANT" not in first["stdin"] and "IMPORTANT" in second["stdin"]
    transcript = (tmp_path / "r/transcript.txt").read_text()
    assert "=== attempt 1" in transcript and "=== attempt 2" in transcript
    assert not Path(first["cwd"]).exists()  # noqa: ASYNC240 - workspace removed by default


async def test_rollout_gives_up_after_the_retries(tmp_path: Path) -> None:
    fake = write_fake_cli(tmp_path / "bin", "copilot", stdout='{"type":"result","exitCode":0}\n')
    out = await run_rollout(
        backend_for(fake.path, CliKind.COPILOT),
        WorkspaceSpec(skill=SKILL, task="t"),
        rollout_dir=tmp_path / "r",
        options=HarnessOptions(empty_retries=1),
    )
    assert out.attempts == 2 and out.answer == ""
    assert "empty answer" in out.parse_error
    assert out.summary.answer_format is AnswerFormat.MISSING
    assert "--output-schema" not in fake.calls()[0]["argv"]


async def test_rollout_failure_is_raised_not_answered_and_transcript_kept(tmp_path: Path) -> None:
    fake = write_fake_cli(
        tmp_path / "bin",
        "codex",
        stdout=json.dumps({"type": "error", "message": "unexpected status 401 Unauthorized"}),
        exit_code=1,
    )
    with pytest.raises(BackendAuthError):
        await run_rollout(
            backend_for(fake.path), WorkspaceSpec(skill=SKILL, task="t"), rollout_dir=tmp_path / "r"
        )
    assert "401" in (tmp_path / "r/transcript.txt").read_text()
    assert len(fake.calls()) == 1  # auth failures are not retried
