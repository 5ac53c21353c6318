"""SIGTERM outside a night's own handling is an interruption: exit 130, never a silent -15.

A night (and the daemon) installs its own SIGTERM handling once its event loop runs; before
that (imports, config, lock) and after it (the loop restores the default action when it
closes its signal receiver) a SIGTERM would kill the process with nothing said. This handler
turns it into :class:`KeyboardInterrupt`, which the command line reports as exit 130, the
same as Ctrl-C. Cheap to import: the entry point installs it before any slow import.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from types import FrameType

__all__ = [
    "EXIT_INTERRUPTED",
    "exit_130_on_sigterm",
    "forget_interrupt_in_exec",
    "treat_sigterm_as_interrupt",
]

EXIT_INTERRUPTED = 130


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _exit_interrupted(signum: int, frame: FrameType | None) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(EXIT_INTERRUPTED)


def treat_sigterm_as_interrupt() -> None:
    """Install (or re-install after an event loop restored the default) the handler."""
    signal.signal(signal.SIGTERM, _interrupt)


def forget_interrupt_in_exec() -> None:
    """Keep exit code 130 after an interruption we handled.

    CPython remembers a KeyboardInterrupt that escaped code run by ``exec`` of a string
    (dataclass and namedtuple creation do that while modules import) and, at exit, kills
    the process with SIGINT instead of returning our exit code, even though the exception
    was caught. Running a string through ``exec`` once more clears that mark.
    """
    exec("")


def exit_130_on_sigterm() -> None:
    """For the last moments of the process (after the command returned): nothing is left to
    unwind, and an exception raised during interpreter shutdown would be lost."""
    signal.signal(signal.SIGTERM, _exit_interrupted)
