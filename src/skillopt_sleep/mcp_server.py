"""`skillopt-sleep mcp`: the nights, inside the user's agent, over MCP on stdio.

Four tools (and two for handoff mode), so Claude Code, Codex, Copilot or Cursor can answer
"what did skillopt learn last night?" and adopt on request:

- ``status``: nights run, recent results, proposals waiting, where the HTML report is;
- ``latest_report``: what a night (default: the latest) kept, rejected and measured;
- ``proposal_diff``: the pending proposal against the live files;
- ``adopt``: refuses unless ``confirm`` is the boolean true *and* ``run_id`` names the proposal
  the user saw; then runs the very adoption the CLI runs (sha pins, skill roots, backups,
  rollback), finishing an interrupted adoption first;
- ``handoff_next`` / ``handoff_answer``: a night in handoff mode (no model) left prompts in the
  project's handoff directory; the agent is served them one at a time and hands each answer
  back (written to ``answers/<id>.md``, the only file they write), then the user runs the night
  command again; or, with a night started with ``--wait`` running, it takes each answer as it
  lands and ``handoff_next`` waits briefly for its next prompt.

The read tools write nothing: an adoption left half-done is reported (``status``) or refused
(``proposal_diff``), and finished by the commands that say they write. Every tool takes an
optional ``project``, one of the folders the server was started for (``--project`` and each
``--also-project``), never another. Lines that are not JSON-RPC get their error reply
(:mod:`skillopt_sleep.mcp_wire`).

Built on the official ``mcp`` SDK (``MCPServer``). Tools are coroutines so the SDK runs them
on the event loop rather than in worker threads. Nothing is printed to stdout but protocol
messages; logs go to stderr.
"""

from __future__ import annotations

import argparse
import copy
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import StrictBool

from skillopt.errors import SkillOptError
from skillopt.logging import get_logger
from skillopt.redact import redact_obj, sanitize
from skillopt_sleep.adopt_journal import JOURNAL_NAME
from skillopt_sleep.agent_summary import night_summary, pending_diff, status_data
from skillopt_sleep.commands._common import load_config
from skillopt_sleep.commands._runs import (
    adopt_pending,
    find_run,
    latest_with_proposal,
    project_runs,
    recover_adoptions,
)
from skillopt_sleep.config import SleepConfig

__all__ = ["INSTRUCTIONS", "READ_ONLY", "WRITES", "build_server"]

_log = get_logger(__name__)

INSTRUCTIONS = (
    "skillopt-sleep improves this project's agent skill documents (SKILL.md, CLAUDE.md / "
    "AGENTS.md) overnight: it replays the user's recurring tasks, proposes small edits, and "
    "keeps only edits that measurably help on held-out tasks. Nothing becomes live until the "
    "user adopts a proposal. Use `latest_report` to say what it learned, `proposal_diff` to "
    "show what adopting would change, and call `adopt` only after the user has seen that diff "
    "and asked for it, passing confirm=true and the run_id shown."
)
_PROJECT_ARG = (
    " `project` (optional): the project folder, one of those this server was started for "
    "(--project and --also-project); its own project by default."
)
ANSWERS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False)


def _version() -> str:
    try:
        return version("skillopt")
    except PackageNotFoundError:
        return "0"


class _Project:
    """Resolves the config and project for a call: the server's own (``--project``, else its
    working folder), or one the call names among those the server was started for
    (``--project`` plus every ``--also-project``); never any other folder."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        own = (getattr(args, "project", None) or Path.cwd()).expanduser()
        also = getattr(args, "also_project", None) or []
        self.allowed = tuple(dict.fromkeys(p.expanduser().resolve() for p in (own, *also)))

    def load(self, project: str | None) -> tuple[SleepConfig, Path]:
        args = copy.copy(self._args)
        if project:
            wanted = Path(project).expanduser().resolve()
            if wanted not in self.allowed:
                served = ", ".join(str(p) for p in self.allowed)
                raise ToolError(
                    f"this server serves {served} only; start it with --also-project "
                    f"{wanted} to serve that project too"
                )
            args.project = wanted
        try:
            return load_config(args)
        except SkillOptError as exc:
            raise ToolError(sanitize(str(exc))) from exc


def _unfinished(cfg: SleepConfig, project: Path) -> list[str]:
    """Runs whose adoption is in progress or was interrupted (its journal is still there).
    A read tool reports them and leaves the recovery to the commands that write."""
    from skillopt_sleep.versions import restore_dirs

    folders = [*project_runs(cfg, project), *restore_dirs(cfg, project)]
    return [f.name for f in folders if (f / JOURNAL_NAME).is_file()]


_UNFINISHED_NOTE = (
    "an adoption of {runs} is in progress or was interrupted, so the live files may hold part "
    "of it; `adopt` (or any skillopt-sleep command) finishes or rolls it back first"
)


def _run(cfg: SleepConfig, project: Path, run_id: str | None) -> Path:
    """A run of this project, by directory name or night number (never an arbitrary path)."""
    found = find_run(project_runs(cfg, project), run_id, any_path=False)
    if found is None:
        raise ToolError(f"no run {run_id!r} for {project}" if run_id else "no night has run yet")
    return found


def build_server(args: argparse.Namespace) -> MCPServer[Any]:
    projects = _Project(args)
    server: MCPServer[Any] = MCPServer(
        name="skillopt-sleep", version=_version(), instructions=INSTRUCTIONS
    )
    _add_reading_tools(server, projects)
    _add_adopt_tool(server, projects)
    _add_handoff_tools(server, projects)
    return server


def _add_reading_tools(server: MCPServer[Any], projects: _Project) -> None:
    """``status``, ``latest_report`` and ``proposal_diff``: they change nothing."""

    @server.tool(
        description="Nights run for the project, the recent ones with their scores, proposals "
        "waiting to be adopted, and the path of the HTML report." + _PROJECT_ARG,
        annotations=READ_ONLY,
    )
    async def status(project: str | None = None) -> dict[str, Any]:
        cfg, path = projects.load(project)
        try:
            data = status_data(cfg, path)
            unfinished = _unfinished(cfg, path)
        except SkillOptError as exc:
            raise ToolError(sanitize(str(exc))) from exc
        if unfinished:
            data["unfinished_adoptions"] = unfinished
            data["note"] = _UNFINISHED_NOTE.format(runs=", ".join(unfinished))
        return data

    @server.tool(
        description="What a night learned: the edits the gate kept (and why), the ones it "
        "rejected, scores before and after, tasks that improved or regressed, spend. "
        "`night` is a run id or a night number; the latest night by default." + _PROJECT_ARG,
        annotations=READ_ONLY,
    )
    async def latest_report(
        night: str | int | None = None, project: str | None = None
    ) -> dict[str, Any]:
        cfg, path = projects.load(project)
        if isinstance(night, bool) or (isinstance(night, int) and night < 1):
            raise ToolError(f"`night` is a night number (1, 2, ...) or a run id, not {night!r}")
        wanted = str(night) if night is not None else None
        try:
            return night_summary(_run(cfg, path, wanted))
        except SkillOptError as exc:
            raise ToolError(sanitize(str(exc))) from exc

    @server.tool(
        description="The proposal waiting to be adopted, as a unified diff against the live "
        "files (the latest night with one, or the run named by `run_id`)." + _PROJECT_ARG,
        annotations=READ_ONLY,
    )
    async def proposal_diff(
        run_id: str | None = None, project: str | None = None
    ) -> dict[str, Any]:
        cfg, path = projects.load(project)
        try:
            unfinished = _unfinished(cfg, path)
            if unfinished:
                raise ToolError(_UNFINISHED_NOTE.format(runs=", ".join(unfinished)))
            run = _run(cfg, path, run_id) if run_id else latest_with_proposal(cfg, path)
            if run is None:
                raise ToolError("no night has a proposal waiting to be adopted")
            return pending_diff(run)
        except SkillOptError as exc:
            raise ToolError(sanitize(str(exc))) from exc


def _add_adopt_tool(server: MCPServer[Any], projects: _Project) -> None:
    """``adopt``: the one tool that writes, and only on the user's confirmed word."""

    @server.tool(
        description="Adopt a night's proposal: replace the live skill/memory files with it "
        "(sha-pinned, confined to the skill roots, backed up, all or nothing). Only when the "
        "user asked for it after seeing proposal_diff: pass confirm=true and the run_id shown "
        "there. `only` limits it to some of the proposal's files by name; a night that "
        "improved several of the project's skills needs `only` (the skills the user chose) "
        "or `all_skills=true`. `confirm` and `all_skills` are JSON booleans." + _PROJECT_ARG,
        annotations=WRITES,
    )
    async def adopt(
        run_id: str | None = None,
        confirm: StrictBool = False,
        only: list[str] | None = None,
        project: str | None = None,
        all_skills: StrictBool = False,
    ) -> dict[str, Any]:
        cfg, path = projects.load(project)
        run = _run(cfg, path, run_id) if run_id else latest_with_proposal(cfg, path)
        if run is None:
            raise ToolError("no night has a proposal waiting to be adopted")
        if confirm is not True or not run_id:
            raise ToolError(
                f"Nothing was adopted. Show the user proposal_diff for run {run.name}; when they "
                f'agree, call adopt with confirm=true and run_id="{run.name}".'
            )
        if all_skills and only:
            raise ToolError("pass `only` or `all_skills`, not both; nothing was adopted")
        try:
            recovered = recover_adoptions(cfg, path)
            result = adopt_pending(cfg, path, run, only, every=all_skills)
        except SkillOptError as exc:  # refusals and rolled-back failures alike
            raise ToolError(f"Nothing was adopted: {sanitize(str(exc))}") from exc
        if result is None:
            raise ToolError("no proposal was waiting in that run")
        if result.recovered is not None:
            recovered.append(result.recovered)
        _log.info("mcp.adopted", run_dir=str(run), files=[a.name for a in result.adopted])
        data = {
            "adopted": [a.to_dict() for a in result.adopted],
            "run_id": run.name,
            "recovered_adoptions": [r.to_dict() for r in recovered],
        }
        return dict(redact_obj(data))


def _add_handoff_tools(server: MCPServer[Any], projects: _Project) -> None:
    """``handoff_next`` and ``handoff_answer``: answer a handoff night's prompts in place."""
    from skillopt_sleep.handoff import handoff_dir, serve_next, take_answer

    @server.tool(
        description="Handoff mode (a night run with no model): the next prompt the night "
        "waits for, with its id, role, expected format (json or text) and its place in the "
        "list; or, when all have answers, the command that resumes the night. While a night "
        "started with `--wait` runs (night_running), it waits up to 30 s for the night's next "
        "prompt. Answer it as the model would and pass the reply to handoff_answer." + _PROJECT_ARG,
        annotations=READ_ONLY,
    )
    async def handoff_next(project: str | None = None) -> dict[str, Any]:
        cfg, path = projects.load(project)
        try:
            return await serve_next(handoff_dir(cfg, path))
        except SkillOptError as exc:
            raise ToolError(sanitize(str(exc))) from exc
        except OSError as exc:
            raise ToolError(f"the handoff directory cannot be read: {sanitize(str(exc))}") from exc

    @server.tool(
        description="Handoff mode: the answer to the prompt `id` (from handoff_next), only the "
        "reply text. It is written to the handoff directory's answers/<id>.md; the night checks "
        "its format when it resumes." + _PROJECT_ARG,
        annotations=ANSWERS,
    )
    async def handoff_answer(id: str, answer: str, project: str | None = None) -> dict[str, Any]:
        cfg, path = projects.load(project)
        try:
            return take_answer(handoff_dir(cfg, path), id, answer)
        except (ValueError, SkillOptError) as exc:
            raise ToolError(sanitize(str(exc))) from exc
        except OSError as exc:
            raise ToolError(f"the answer cannot be written: {sanitize(str(exc))}") from exc
