"""`skillopt-sleep harvest --output tasks.json`: mine tasks for review, spend nothing.

Reads the same window the next night would (the harvest cursor, else the first-night
lookback) and writes a draft tasks file (``reviewed: false``). Review it, edit it, set
``"reviewed": true``, then ``skillopt-sleep once --tasks-file tasks.json``.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

from skillopt_sleep.commands._common import (
    EXIT_OK,
    add_config_args,
    emit_json,
    known_errors,
    load_config,
    refuse,
    say,
    setup_logging,
)

NAME = "harvest"
HELP = "Mine recent sessions into a reviewable tasks file (no model calls)."
ORDER = 40


def register(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument("--output", type=Path, help="write the draft tasks file here")


def run(args: argparse.Namespace) -> int:
    setup_logging(args)
    from skillopt_sleep.gather import gather, harvest_window_start
    from skillopt_sleep.state import StateStore
    from skillopt_sleep.tasks_file import write_tasks_file

    try:
        cfg, project = load_config(args)
        state = StateStore(cfg.state_path()).load(project)
        now = datetime.now(UTC)
        since = harvest_window_start(cfg, state.harvest_cursor, now)
        got = gather(cfg, project=project, since=since)
        if args.output:
            write_tasks_file(
                args.output,
                got.tasks,
                generated_at=now,
                metadata={"project": str(project), "source": got.source,
                          "n_sessions": got.n_sessions},
            )  # fmt: skip
    except known_errors() as exc:
        return refuse(args, type(exc).__name__, str(exc))
    if args.json:
        emit_json(
            {
                "ok": True,
                "n_sessions": got.n_sessions,
                "output": str(args.output) if args.output else None,
                "tasks": [t.to_dict() for t in got.tasks],
                "diagnostics": got.diagnostics,
            }
        )
        return EXIT_OK
    say(f"{got.n_sessions} session(s) -> {len(got.tasks)} task(s)")
    for t in got.tasks:
        say(f"  [{t.split.value}/{t.outcome.value}] {' '.join(t.intent.split())[:90]}")
    if args.output:
        say(f"draft written to {args.output}: review it, set \"reviewed\": true, then run "
            f"`skillopt-sleep once --tasks-file {args.output}`")  # fmt: skip
    return EXIT_OK
