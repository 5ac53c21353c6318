"""`skillopt-sleep once` that kills itself at a chosen point of the night (resume tests).

    python tests/support/killing_night.py WHEN once --json --config C --project P

``WHEN`` is a stage name (SIGKILL once ``run.json`` records the stage as done),
``rollouts=N`` (SIGKILL once N rollouts are on disk) or ``sigint:<stage>`` (SIGINT after
the stage: the Ctrl-C path). The night runs exactly as the CLI runs it; the kill comes
from a stage observer, so no test hook lives in the night.
"""

from __future__ import annotations

import os
import signal
import sys

from skillopt_sleep.cli import build_parser
from skillopt_sleep.commands import once


class KillAt:
    """A stage observer that signals its own process at ``when``."""

    def __init__(self, when: str) -> None:
        self.rollouts = int(when.partition("=")[2]) if when.startswith("rollouts=") else 0
        self.signal = signal.SIGINT if when.startswith("sigint:") else signal.SIGKILL
        self.stage = when.removeprefix("sigint:") if not self.rollouts else ""

    def stage_started(self, name: str) -> None:
        return None

    def stage_ended(self, name: str) -> None:
        if name == self.stage:
            os.kill(os.getpid(), self.signal)

    def rollouts_recorded(self, total: int) -> None:
        if self.rollouts and total >= self.rollouts:
            os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    when, *rest = argv
    args = build_parser().parse_args(rest)
    if args.command != "once":
        raise SystemExit("usage: killing_night.py WHEN once [once options]")
    return once.run(args, observer=KillAt(when))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
