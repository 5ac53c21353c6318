"""`skillopt-sleep integrate AGENT`: register the MCP server with Claude Code, Codex, Copilot
or Cursor; with ``--plugin``, install (or ``--remove``) the agent plugin instead.

Prints what to run (or the config snippet) by default. ``--write`` shows the change, then
makes it: through the agent's own ``mcp add`` command for Claude Code, Codex and the Copilot
CLI (they own their config formats), or by merging into the project's ``.cursor/mcp.json``
for Cursor (atomic write; an unreadable file is refused, never replaced). ``--plugin`` is
:mod:`._plugin_install`: the Claude Code plugin (slash commands, the MCP server, the
SessionEnd hook), Codex's skills and instructions, Copilot's instructions.
"""

from __future__ import annotations

import argparse
import difflib
import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio

from skillopt.atomicio import atomic_write_text
from skillopt_sleep.agent_plugin import package_version
from skillopt_sleep.commands._common import (
    EXIT_FAILED,
    EXIT_OK,
    add_config_args,
    emit_json,
    refuse,
    say,
    setup_logging,
)

__all__ = [
    "AGENTS",
    "CLI_TIMEOUT",
    "HELP",
    "NAME",
    "ORDER",
    "SERVER",
    "agent_cli_command",
    "config_flags",
    "cursor_config",
    "program_command",
    "register",
    "run",
    "server_command",
]

NAME = "integrate"
HELP = (
    "Register `skillopt-sleep mcp` with your agent (claude, codex, copilot, cursor); "
    "--plugin installs the agent plugin (commands, hook)."
)
ORDER = 61
SERVER = "skillopt-sleep"
AGENTS = ("claude", "codex", "copilot", "cursor")
CLI_TIMEOUT = 60.0


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("agent", choices=AGENTS, help="the agent to register the server with")
    add_config_args(parser)
    parser.add_argument(
        "--write", action="store_true", help="make the change (shown first) instead of printing it"
    )
    parser.add_argument(
        "--plugin",
        action="store_true",
        help="the plugin instead of the MCP registration: Claude Code's (slash commands, the "
        "MCP server, a SessionEnd hook), Codex's skills (the same commands) and AGENTS.md "
        "block, "
        "Copilot's instructions block",
    )
    parser.add_argument(
        "--remove", action="store_true", help="with --plugin: take the plugin out again"
    )


def program_command() -> list[str]:
    """This install's ``skillopt-sleep``, as an agent should run it."""
    here = Path(sys.executable).parent / "skillopt-sleep"
    found = shutil.which("skillopt-sleep")
    if here.exists():
        return [str(here.absolute())]
    if found:
        return [found]
    return [sys.executable, "-m", "skillopt_sleep"]


def config_flags(args: argparse.Namespace) -> list[str]:
    """``--config`` / ``--state-dir`` as given, made absolute."""
    flags: list[str] = []
    if args.config:
        flags += ["--config", str(Path(args.config).expanduser().resolve())]
    if args.state_dir:
        flags += ["--state-dir", str(Path(args.state_dir).expanduser().resolve())]
    return flags


def server_command(args: argparse.Namespace, *, pin_project: bool) -> list[str]:
    """How the agent starts the server: this install's ``skillopt-sleep mcp``."""
    command = [*program_command(), "mcp", *config_flags(args)]
    if pin_project:
        command += ["--project", str(_project(args))]
    return command


def _project(args: argparse.Namespace) -> Path:
    return Path(args.project or Path.cwd()).expanduser().resolve()


def agent_cli_command(agent: str, server: list[str]) -> list[str]:
    """The agent's own command that registers ``server`` (Claude Code: this project only)."""
    scope = ["--scope", "local"] if agent == "claude" else []
    return [agent, "mcp", "add", *scope, SERVER, "--", *server]


def cursor_config(existing: str, server: list[str]) -> str:
    """``.cursor/mcp.json`` with our server added (other servers and keys kept)."""
    data: dict[str, Any] = json.loads(existing) if existing.strip() else {}
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers", {}), dict):
        raise ValueError("expected a JSON object with an `mcpServers` object")
    servers = dict(data.get("mcpServers", {}))
    servers[SERVER] = {"command": server[0], "args": server[1:]}
    return json.dumps({**data, "mcpServers": servers}, indent=2) + "\n"


async def _run_cli(command: list[str], cwd: Path) -> tuple[int, str]:
    with anyio.fail_after(CLI_TIMEOUT):
        done = await anyio.run_process(command, cwd=cwd, check=False, stdin=None)
    return done.returncode, (done.stdout + done.stderr).decode("utf-8", "replace")


def _cursor(args: argparse.Namespace) -> int:
    server = server_command(args, pin_project=True)
    path = _project(args) / ".cursor" / "mcp.json"
    try:
        before = path.read_text(encoding="utf-8") if path.is_file() else ""
        after = cursor_config(before, server)
    except (OSError, ValueError) as exc:
        return refuse(args, "unreadable_config", f"{path}: {exc}; fix it or add the server by hand")
    if args.json:
        emit_json({"ok": True, "agent": "cursor", "path": str(path), "config": json.loads(after),
                   "written": bool(args.write)})  # fmt: skip
    else:
        say(f"# {path}" + ("" if args.write else " (run again with --write to make this change)"))
        diff = difflib.unified_diff(
            before.splitlines(), after.splitlines(), "before", "after", lineterm=""
        )
        say("\n".join(diff) or "(already registered; nothing to change)")
    if args.write and before != after:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, after)
    return EXIT_OK


def _plugin(args: argparse.Namespace) -> int:
    from skillopt_sleep.commands import _plugin_install

    changes = _plugin_install.plan(
        args.agent,
        remove=args.remove,
        server=server_command(args, pin_project=False),
        program=program_command(),
        flags=config_flags(args),
        version=package_version(),
    )
    return _plugin_install.run(args, changes, CLI_TIMEOUT)


def run(args: argparse.Namespace) -> int:
    setup_logging(args)
    if args.remove and not args.plugin:
        return refuse(args, "usage", "--remove goes with --plugin")
    if args.plugin:
        return _plugin(args)
    if args.agent == "cursor":
        return _cursor(args)
    # Claude Code's local scope belongs to one project, so the server is pinned to it; Codex
    # and Copilot keep one user-wide entry, and the server serves the agent's working folder.
    server = server_command(args, pin_project=args.agent == "claude")
    command = agent_cli_command(args.agent, server)
    shown = shlex.join(command)
    if not args.write:
        if args.json:
            emit_json({"ok": True, "agent": args.agent, "command": command, "written": False})
        else:
            say(f"# run this (or add --write to let skillopt-sleep run it):\n{shown}")
        return EXIT_OK
    if shutil.which(args.agent) is None:
        return refuse(args, "agent_not_found", f"`{args.agent}` is not on PATH; run:\n{shown}")
    if not args.json:
        say(f"running: {shown}")
    try:
        code, output = anyio.run(_run_cli, command, _project(args))
    except (OSError, TimeoutError) as exc:
        return refuse(args, "agent_cli_failed", f"could not run {args.agent}: {exc}", EXIT_FAILED)
    if code != 0:
        return refuse(args, "agent_cli_failed", f"{args.agent} exited {code}: {output.strip()}",
                      EXIT_FAILED)  # fmt: skip
    if args.json:
        emit_json({"ok": True, "agent": args.agent, "command": command, "written": True})
    else:
        say(output.strip())
    return EXIT_OK
