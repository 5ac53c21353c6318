"""`skillopt-sleep status`: recent nights, pending proposals, and when the next night runs."""

from __future__ import annotations

import argparse
from typing import Any

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

NAME = "status"
HELP = "Show recent nights, proposals waiting to be adopted, and the next scheduled night."
ORDER = 20
SHOWN = 5


def register(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)


def _next_wake(cfg: Any, project: Any) -> str | None:
    try:
        from skillopt_sleep.daemon import next_wake_times
    except ImportError:  # the scheduler extra is not installed
        return None
    settings = cfg.daemon.with_projects([project])
    when = next_wake_times(settings).get(project)
    return when.isoformat() if when else None


def run(args: argparse.Namespace) -> int:
    setup_logging(args)
    from skillopt_sleep.commands._runs import pending, run_summary, runs_root
    from skillopt_sleep.rundir import RunDir
    from skillopt_sleep.state import StateStore

    try:
        cfg, project = load_config(args)
        state = StateStore(cfg.state_path()).load(project)
        runs = RunDir.list_runs(runs_root(cfg, project))
        nights = [run_summary(p) for p in runs[-SHOWN:]]
        proposals = [e for p in runs for e in pending(p)]
        next_wake = _next_wake(cfg, project)
    except known_errors() as exc:
        return refuse(args, type(exc).__name__, str(exc))
    data = {
        "ok": True,
        "project": str(project),
        "nights_run": state.night,
        "harvest_cursor": state.harvest_cursor.isoformat() if state.harvest_cursor else None,
        "recent": nights,
        "pending_proposals": proposals,
        "next_wake": next_wake,
    }
    if args.json:
        emit_json(data)
        return EXIT_OK
    say(f"project {project}: {state.night} night(s) run")
    say(f"  harvest cursor: {data['harvest_cursor'] or 'not set (first night)'}")
    say(f"  next scheduled night: {next_wake or 'not scheduled'}")
    if not nights:
        say("  no nights yet: run `skillopt-sleep once`")
    for n in nights:
        extra = f" — {n['reason']}" if n.get("reason") else ""
        dry = " (dry run)" if n.get("dry_run") else ""
        say(f"  {n['run_id']}: {n['status']} / {n['outcome']}{dry}{extra}")
    if proposals:
        say("pending proposals (adopt with `skillopt-sleep adopt`):")
        for p in proposals:
            say(f"  {p['name']} ({p['kind']}) -> {p['live_path']}  [{p['run_dir']}]")
    else:
        say("no pending proposals")
    return EXIT_OK
