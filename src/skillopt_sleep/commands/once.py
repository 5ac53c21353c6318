"""`skillopt-sleep once`: run one night now (or resume the one that was interrupted)."""

from __future__ import annotations

import argparse
import random

from skillopt_sleep.commands._common import (
    DEFAULT_PATIENCE,
    EXIT_INTERRUPTED,
    EXIT_WAITING,
    add_night_args,
    setup_logging,
)
from skillopt_sleep.observer import NO_OBSERVER, StageObserver

__all__ = ["HELP", "NAME", "ORDER", "register", "run", "start_delay"]

NAME = "once"
HELP = "Run one night now: harvest, replay, reflect, gate, stage (resumes an interrupted one)."
ORDER = 10


def _seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def _patience(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 7 * 86400:
        raise argparse.ArgumentTypeError(f"expected seconds in (0, 604800], got {text!r}")
    return value


def register(parser: argparse.ArgumentParser) -> None:
    add_night_args(parser)
    parser.add_argument(
        "--handoff",
        action="store_true",
        help="call no model: write the night's prompts to the project's handoff directory "
        f"(PROMPTS.md, pending.json) and exit {EXIT_WAITING}; answer them in answers/<id>.md, "
        "then run the same command again to resume (docs/handoff.md)",
    )
    parser.add_argument(
        "--wait",
        type=_patience,
        nargs="?",
        const=DEFAULT_PATIENCE,
        default=0.0,
        metavar="SECONDS",
        help="with --handoff: keep running and take each answer as it lands, so the night "
        "is answered in one sitting; exit 75 as without it once no answer has come for "
        f"SECONDS (default {DEFAULT_PATIENCE:g})",
    )
    parser.add_argument(
        "--jitter",
        type=_seconds,
        default=0,
        metavar="SECONDS",
        help="first wait a random 0..SECONDS (daemon.jitter_seconds: cron and launchd pass it)",
    )


def start_delay(jitter: int, rng: random.Random | None = None) -> float:
    """How long to wait before starting: uniform in [0, jitter] seconds."""
    return (rng or random.Random()).uniform(0, jitter) if jitter > 0 else 0.0


def run(args: argparse.Namespace, *, observer: StageObserver = NO_OBSERVER) -> int:
    """``observer`` watches the night's stages (the resume tests stop a night with one)."""
    setup_logging(args)
    from skillopt_sleep.commands._night_cmd import run_command  # after logging is set up

    delay = start_delay(args.jitter)
    if delay:  # before the lock: a waiting night holds nothing
        import anyio

        from skillopt.logging import get_logger

        get_logger(__name__).info("night.jitter", delay_s=round(delay, 3))
        try:
            anyio.run(anyio.sleep, delay)
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
    return run_command(args, dry_run=False, observer=observer)
