"""`skillopt-sleep mcp`: serve status, the latest report, the pending diff and adopt over MCP.

Speaks MCP on stdin/stdout for an agent (Claude Code, Codex, Copilot, Cursor) that starts it;
docs/report-and-mcp.md shows how to register it. Logs go to stderr.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import anyio

from skillopt_sleep.commands._common import EXIT_OK, add_config_args, setup_logging

__all__ = ["HELP", "NAME", "ORDER", "register", "run"]

NAME = "mcp"
HELP = "Serve the nights to your agent over MCP (stdio): status, last report, diff, adopt."
ORDER = 60


def register(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument(
        "--also-project",
        type=Path,
        action="append",
        metavar="DIR",
        help="another project the agent may name in a tool's `project` argument (repeatable); "
        "by default a tool serves --project (or the working folder) only",
    )


def run(args: argparse.Namespace) -> int:
    setup_logging(args)
    from skillopt_sleep.mcp_server import build_server
    from skillopt_sleep.mcp_wire import serve_stdio

    server = build_server(args)
    anyio.run(serve_stdio, server)
    return EXIT_OK
