"""Small helpers shared by the `skillopt` and `skillopt-sleep` command lines."""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["EXIT_BROKEN_PIPE", "LOG_LEVELS", "log_level", "quiet_broken_pipe"]

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer killed by the pipe


def quiet_broken_pipe() -> int:
    """The reader of our stdout went away (``... | head``): stop quietly, like other tools.

    Points stdout at /dev/null so the interpreter's final flush cannot raise again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(text: str) -> str:
    """An argparse ``type`` for ``--log-level``: a known level name, any case."""
    level = text.strip().upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"unknown log level {text!r} (choose from {', '.join(LOG_LEVELS)})"
        )
    return level
