"""The docs and the product agree: documented flags exist, config keys are documented.

Each test reads the documentation as a user would and checks it against the real argparse
parsers and config models, so a renamed flag or a new key fails here before it misleads
anyone.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from skillopt_sleep.cli import build_parser as sleep_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def flags(parser: argparse.ArgumentParser) -> set[str]:
    return {opt for action in parser._actions for opt in action.option_strings}


def one_line(text: str) -> str:
    return " ".join(text.split())


def test_the_common_flags_are_where_the_docs_say() -> None:
    """night.md: every command takes --config, --state-dir and --log-level; every command
    but daemon --project and --json (README says the same about --json)."""
    night = one_line((DOCS / "night.md").read_text())
    assert "Every command takes `--config`, `--state-dir` and `--log-level`." in night
    assert "Every command but `daemon` also takes `--project`" in night
    assert "every command but the long-running `daemon`" in one_line(
        (ROOT / "README.md").read_text()
    )
    commands = subcommands(sleep_parser())
    assert {"once", "dry-run", "status", "adopt", "harvest", "schedule", "daemon"} <= set(commands)
    for name, parser in commands.items():
        have = flags(parser)
        assert {"--config", "--state-dir", "--log-level"} <= have, name
        if name != "daemon":
            assert {"--project", "--json"} <= have, name
