"""`skillopt-sleep dry-run`: a whole night without staging anything or moving the cursor."""

from __future__ import annotations

import argparse

from skillopt_sleep.commands._common import add_night_args, setup_logging

__all__ = ["HELP", "NAME", "ORDER", "register", "run"]

NAME = "dry-run"
HELP = "Everything a night does except staging a proposal and saving state (still spends)."
ORDER = 11


def register(parser: argparse.ArgumentParser) -> None:
    add_night_args(parser)


def run(args: argparse.Namespace) -> int:
    setup_logging(args)
    from skillopt_sleep.commands._night_cmd import run_command  # after logging is set up

    return run_command(args, dry_run=True)
