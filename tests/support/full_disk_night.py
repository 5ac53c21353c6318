"""`skillopt-sleep once` whose disk fills up part-way through the night (storage tests).

    python tests/support/full_disk_night.py N once --json --config C --project P

Once ``N`` rollouts are on disk, every file stops growing (``RLIMIT_FSIZE`` of one byte:
a write past it fails with ``EFBIG``, as a full disk fails with ``ENOSPC``), the night's own
files and ``run.json`` alike. The night runs exactly as the CLI runs it; the limit comes
from a stage observer, so no test hook lives in the night.
"""

from __future__ import annotations

import resource
import sys

from skillopt_sleep.cli import build_parser
from skillopt_sleep.commands import once


class FillAt:
    """A stage observer that fills the disk once ``rollouts`` rollouts are recorded."""

    def __init__(self, rollouts: int) -> None:
        self.rollouts = rollouts

    def stage_started(self, name: str) -> None:
        return None

    def stage_ended(self, name: str) -> None:
        return None

    def rollouts_recorded(self, total: int) -> None:
        if total >= self.rollouts:
            resource.setrlimit(resource.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))


def run(argv: list[str]) -> int:
    when, *rest = argv
    args = build_parser().parse_args(rest)
    if args.command != "once":
        raise SystemExit("usage: full_disk_night.py N once [once options]")
    return once.run(args, observer=FillAt(int(when)))


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
