"""`skillopt-sleep mcp`: serve status, the latest report, the pending diff and adopt over MCP.

Speaks MCP on stdin/stdout for an agent (Claude Code, Codex, Copilot, Cursor) that starts it;
docs/report-and-mcp.md shows how to register it. Logs go to stderr.
"""

from __future__ import annotations

import argparse

import anyio

from skillopt_sleep.commands._common import EXIT_OK, add_config_args, setup_logging

__all__ = ["HELP", "NAME", "ORDER", "register", "run"]

NAME = "mcp"
HELP = "Serve the nights to your agent over MCP (stdio): status, last report, diff, adopt."
ORDER = 60


def register(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)


def run(args: argparse.Namespace) -> int:
    setup_logging(args)
    from skillopt_sleep.mcp_server import build_server

    server = build_server(args)
    anyio.run(server.run_stdio_async)
    return EXIT_OK
