"""`skillopt-sleep once`: run one night now (or resume the one that was interrupted)."""

from __future__ import annotations

import argparse

from skillopt_sleep.commands._common import add_night_args, setup_logging
from skillopt_sleep.observer import NO_OBSERVER, StageObserver

NAME = "once"
HELP = "Run one night now: harvest, replay, reflect, gate, stage (resumes an interrupted one)."
ORDER = 10


def register(parser: argparse.ArgumentParser) -> None:
    add_night_args(parser)


def run(args: argparse.Namespace, *, observer: StageObserver = NO_OBSERVER) -> int:
    """``observer`` watches the night's stages (the resume tests stop a night with one)."""
    setup_logging(args)
    from skillopt_sleep.commands._night_cmd import run_command  # after logging is set up

    return run_command(args, dry_run=False, observer=observer)
