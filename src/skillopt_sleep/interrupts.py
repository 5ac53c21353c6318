"""SIGTERM outside a night's own handling is an interruption: exit 130, never a silent -15.

A night (and the daemon) installs its own SIGTERM handling once its event loop runs; before
that (imports, config, lock) and after it (the loop restores the default action when it
closes its signal receiver) a SIGTERM would kill the process with nothing said. This handler
turns it into :class:`KeyboardInterrupt`, which the command line reports as exit 130, the
same as Ctrl-C. Cheap to import: the entry point installs it before any slow import.
"""

from __future__ import annotations

import signal
from types import FrameType


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def treat_sigterm_as_interrupt() -> None:
    """Install (or re-install after an event loop restored the default) the handler."""
    signal.signal(signal.SIGTERM, _interrupt)
