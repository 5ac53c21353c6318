"""`skillopt-sleep daemon` whose nights only sleep: scheduling and signals without models.

    python tests/support/sleeping_daemon.py SECONDS daemon --config C [daemon options]

Each night writes a minimal run record (running, then complete or aborted and resumable)
and sleeps ``SECONDS``. The daemon itself is the real one; the night reaches it through
the command's ``night`` seam, so no test night lives in the daemon.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from skillopt.atomicio import atomic_write_json
from skillopt_sleep.cli import build_parser
from skillopt_sleep.commands import daemon
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.daemon.service import NightRequest, NightRunner, NightSummary
from skillopt_sleep.night_end import RunStatus


def sleep_night(state_dir: Path, seconds: float) -> NightRunner:
    """A night that sleeps, recording running -> complete | aborted (resumable)."""

    async def run_one(request: NightRequest) -> NightSummary:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        run_dir = state_dir / "projects" / request.key / "runs" / f"{stamp}-{os.getpid()}-test"
        record: dict[str, Any] = {
            "status": "running",
            "project": str(request.project.path),
            "reason": str(request.reason),
            "stage": "sleep",
        }
        atomic_write_json(run_dir / "run.json", record)
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            record.update(status="aborted", abort_reason="daemon shutdown", resumable=True)
            atomic_write_json(run_dir / "run.json", record)
            raise
        record.update(status="complete")
        atomic_write_json(run_dir / "run.json", record)
        return NightSummary(status=RunStatus.COMPLETE, run_dir=run_dir, detail="test night")

    return run_one


def main(argv: list[str]) -> int:
    seconds, *rest = argv
    args = build_parser().parse_args(rest)
    if args.command != "daemon":
        raise SystemExit("usage: sleeping_daemon.py SECONDS daemon [daemon options]")

    def night(cfg: SleepConfig) -> NightRunner:
        return sleep_night(cfg.state_path(), float(seconds))

    return daemon.run(args, night=night)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
