"""The exec harness: run a target agent CLI on one task with the skill installed as a file.

One rollout = a fresh workspace (:mod:`.workspace`), one or more attempts through a
:class:`~skillopt.backends.cli.member.CliBackend` (re-run when the answer is empty, with a firmer
prompt), a structured answer where the CLI supports a JSON schema (codex, claude), and three
artifacts under the rollout directory, all redacted and written atomically:

* ``transcript.txt``     raw stdout/stderr of every attempt, separated
* ``trace_summary.json`` settings seen, whether task.md / SKILL.md were read, exec errors,
                         answer format and label, tokens
* ``steps.txt``          the numbered step trace as the optimizer sees it

Errors (auth, unsupported model, timeouts...) propagate as typed ``BackendError`` after the
transcript so far is saved; the CLI's error text is never returned as an answer.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillopt.atomicio import atomic_write_json, atomic_write_text
from skillopt.backends.cli.common import CallPlan, CliKind, ParsedReply
from skillopt.backends.cli.member import TOOLS_LOG_DIR, CliBackend, CliRun
from skillopt.backends.cli.tool_shims import install_shims
from skillopt.backends.harness.trace import (
    Step,
    TraceSummary,
    answer_format,
    exec_errors,
    parse_steps,
    read_status,
    render_steps,
    settings_seen,
)
from skillopt.backends.harness.workspace import (
    WorkspaceSpec,
    build_prompt,
    build_workspace,
    skill_paths,
)
from skillopt.errors import BackendError
from skillopt.logging import get_logger
from skillopt.redact import redact_text, sanitize

__all__ = [
    "ANSWER_SCHEMA",
    "SCHEMA_KINDS",
    "HarnessOptions",
    "RolloutOutcome",
    "extract_answer",
    "run_rollout",
]

_log = get_logger(__name__)

ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "final_response": {
            "type": "string",
            "description": "The exact final reply, with any required answer tags kept.",
        },
        "final_answer": {"type": "string", "description": "The bare answer value."},
    },
    "required": ["final_response", "final_answer"],
    "additionalProperties": False,
}
SCHEMA_KINDS = frozenset({CliKind.CODEX, CliKind.CLAUDE})


@dataclass(frozen=True, slots=True, kw_only=True)
class HarnessOptions:
    empty_retries: int = 1  # extra attempts when the answer comes back empty
    answer_tag: str = "answer"  # final_answer is wrapped as <tag>value</tag>
    label_pattern: str | None = None  # a regex a well-formed label must match
    structured: bool = True  # ask for a JSON-schema answer where the CLI supports one
    keep_workspace: bool = False  # keep it under the rollout dir instead of deleting it
    trace_budget: int = 4000  # characters of rendered step trace
    time_limit: float | None = None  # per attempt; the member's timeout when None
    answer_hint: str = ""  # extra instruction line about the answer format


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutOutcome:
    answer: str
    label: str
    parse_error: str
    attempts: int
    tools_called: tuple[str, ...]
    summary: TraceSummary
    steps: tuple[Step, ...]
    trace_text: str
    rollout_dir: Path


def extract_answer(reply: ParsedReply, *, tag: str, structured: bool) -> tuple[str, str]:
    """(answer, parse_error). Prefer ``final_response``; else wrap ``final_answer`` in tags."""
    data = reply.structured
    if data is None and structured:
        try:
            loaded = json.loads(reply.text)
        except ValueError:
            loaded = None
        data = loaded if isinstance(loaded, dict) else None
    if data is None:
        return reply.text, ""
    response, bare = data.get("final_response"), data.get("final_answer")
    if isinstance(response, str) and response.strip():
        return response, ""
    if isinstance(bare, str) and bare.strip():
        return f"<{tag}>{bare.strip()}</{tag}>", ""
    return "", "structured answer had neither final_response nor final_answer"


async def run_rollout(
    backend: CliBackend,
    spec: WorkspaceSpec,
    *,
    rollout_dir: Path,
    options: HarnessOptions | None = None,
) -> RolloutOutcome:
    """Run one task in a fresh workspace and persist its transcript and trace summary."""
    opts = options or HarnessOptions()
    workspace, scratch = _prepare_dirs(rollout_dir, keep=opts.keep_workspace)
    transcript: list[str] = []
    try:
        build_workspace(workspace, spec)
        hint = ""
        if spec.tools:
            hint = install_shims(workspace, scratch / TOOLS_LOG_DIR, spec.tools).hint()
        use_schema = opts.structured and backend.spec.kind in SCHEMA_KINDS
        run: CliRun | None = None
        answer, parse_error, attempt = "", "", 0
        for attempt in range(1, opts.empty_retries + 2):
            prompt = build_prompt(spec, answer_hint=opts.answer_hint, retry=attempt > 1)
            if hint:
                prompt = f"{prompt}\n{hint}"
            plan = CallPlan(
                prompt=redact_text(prompt),
                cwd=workspace,
                scratch=scratch,
                tools=spec.tools,
                writable=spec.writable,
                schema=ANSWER_SCHEMA if use_schema else None,
            )
            try:
                run = await backend.run(plan, time_limit=opts.time_limit)
            except BackendError as exc:
                transcript.append(f"=== attempt {attempt}: {exc.error_class}\n{exc.cause}\n")
                raise
            transcript.append(
                f"=== attempt {attempt} (exit {run.process.returncode})\n"
                f"--- stdout\n{run.process.stdout}\n--- stderr\n{run.process.stderr}\n"
            )
            answer, parse_error = extract_answer(
                run.reply, tag=opts.answer_tag, structured=use_schema
            )
            if answer.strip():
                break
            _log.info("harness_empty_answer", member=backend.name, attempt=attempt)
        assert run is not None
        if not answer.strip() and not parse_error:
            parse_error = f"empty answer after {attempt} attempt(s)"
        return _finish(backend, spec, run, answer, parse_error, attempt, opts, rollout_dir)
    finally:
        atomic_write_text(rollout_dir / "transcript.txt", sanitize("\n".join(transcript)))
        shutil.rmtree(scratch, ignore_errors=True)
        if not opts.keep_workspace:
            shutil.rmtree(workspace.parent, ignore_errors=True)


def _prepare_dirs(rollout_dir: Path, *, keep: bool) -> tuple[Path, Path]:
    """(workspace path, not yet created; our scratch dir, outside the workspace)."""
    rollout_dir.mkdir(parents=True, exist_ok=True)
    if keep:
        workspace = rollout_dir / "workspace"
        if workspace.exists():
            shutil.rmtree(workspace)
    else:
        workspace = Path(tempfile.mkdtemp(prefix="skillopt-ws-")) / "workspace"
    return workspace, Path(tempfile.mkdtemp(prefix="skillopt-harness-"))


def _finish(
    backend: CliBackend,
    spec: WorkspaceSpec,
    run: CliRun,
    answer: str,
    parse_error: str,
    attempts: int,
    opts: HarnessOptions,
    rollout_dir: Path,
) -> RolloutOutcome:
    steps = parse_steps(run.process.stdout)
    fmt, label = answer_format(answer, tag=opts.answer_tag, label_pattern=opts.label_pattern)
    sandbox, reasoning = settings_seen(run.argv)
    summary = TraceSummary(
        cli=backend.spec.kind.value,
        sandbox=sandbox,
        reasoning=reasoning,
        task_read=read_status(steps, "task.md"),
        skill_read=read_status(steps, "SKILL.md"),
        exec_errors=exec_errors(steps),
        answer_format=fmt,
        answer_label=label,
        attempts=attempts,
        prompt_tokens=run.reply.prompt_tokens,
        completion_tokens=run.reply.completion_tokens,
        parse_error=parse_error,
    )
    trace_text = render_steps(steps, budget=opts.trace_budget)
    atomic_write_json(rollout_dir / "trace_summary.json", _redacted(summary.as_dict()))
    atomic_write_text(rollout_dir / "steps.txt", sanitize(trace_text) + "\n")
    _log.info(
        "harness_rollout",
        member=backend.name,
        attempts=attempts,
        answer_format=fmt.value,
        skill=skill_paths(spec.skill.name)[0],
    )
    return RolloutOutcome(
        answer=answer,
        label=label,
        parse_error=parse_error,
        attempts=attempts,
        tools_called=run.tools_called,
        summary=summary,
        steps=tuple(steps),
        trace_text=trace_text,
        rollout_dir=rollout_dir,
    )


def _redacted(data: dict[str, Any]) -> dict[str, Any]:
    return {k: sanitize(v) if isinstance(v, str) else v for k, v in data.items()}
