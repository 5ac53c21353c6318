"""`skillopt-sleep status`: recent nights, pending proposals, and when the next night runs."""

from __future__ import annotations

import argparse
from typing import Any

from skillopt_sleep.commands._common import (
    EXIT_OK,
    add_config_args,
    again,
    emit_json,
    known_errors,
    load_config,
    refuse,
    say,
    setup_logging,
)

__all__ = ["HELP", "NAME", "ORDER", "SHOWN", "register", "run"]

NAME = "status"
HELP = "Show recent nights, proposals waiting to be adopted, and the next scheduled night."
ORDER = 20
SHOWN = 5


def register(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)


def _schedule_health(cfg: Any, project: Any) -> dict[str, Any]:
    """Next wake, whether a daemon runs, and who holds the project lock right now."""
    from skillopt_sleep.daemon.health import project_health

    return project_health(cfg.daemon, cfg.state_path(), project)


def _archive_stats(cfg: Any, project: Any) -> dict[str, Any] | None:
    """The task archive's sizes and the harvest backlog (``None`` before the first night)."""
    from skillopt_sleep.state import project_dir
    from skillopt_sleep.tasks.archive import archive_path, open_archive

    path = archive_path(project_dir(cfg.state_path(), project))
    if not path.is_file():
        return None
    with open_archive(path) as archive:
        return archive.stats().to_dict()


def _say_archive(stats: dict[str, Any] | None) -> None:
    if stats is None:
        say("  task archive: none yet (the first night creates it)")
        return
    say(
        f"  task archive: {stats['tasks']} task(s): {stats['active']} active "
        f"({stats['failing']} not passing yet), {stats['retired']} retired; "
        f"{stats['pending_edits']} edit(s) carried to later nights"
    )
    for line in stats.get("supersessions") or ():
        say(f"  {line}")
    when = f" after night {stats['last_harvest_night']}" if stats["last_harvest_night"] else ""
    by = str(stats.get("counted_by") or "")
    if by:  # a command, or a night that kept nothing (its sessions all still pending)
        when = f" (counted by {by})" if by.startswith("night ") else f" (counted by `{by}`)"
    start = stats["window_start"] or ("all history" if stats["window_fixed"] else "not set yet")
    say(
        f"  harvest: {stats['harvested_sessions']} session(s) harvested; backlog "
        f"{stats['backlog']} pending{when}; {stats['outside_window']} older than the window"
        f" (window start: {start})"
    )


def _say_learned(learned: dict[str, Any]) -> None:
    """Where the project's learned skill lives, and what is left of the shared one."""
    there = "" if learned["exists"] else " (not created yet: adopting a night's proposal does)"
    say(f"  learned skill: {learned['path']}{there}")
    if learned.get("note"):
        say(f"    {learned['note']}")


def _say_watched(watched: list[dict[str, Any]]) -> None:
    """Each adopted learned line and the corrections on its requests before and after."""
    if not watched:
        return
    flagged = sum(1 for w in watched if w["contradicted"])
    tail = f"; {flagged} flagged" if flagged else ""
    say(f"  adopted lines, watched in your later sessions ({len(watched)}{tail}):")
    for w in watched:
        before, after = w["before"], w["after"]
        mark = "FLAGGED " if w["contradicted"] else ""
        say(
            f"    {mark}{w['edit_id']} {w['target']}: {w['line'][:90]} (night {w['night']}, "
            f"adopted {str(w['adopted_at'])[:10]}): corrections before {before['corrections']}"
            f" in {before['sessions']} session(s), after {after['corrections']} in "
            f"{after['sessions']} session(s)"
        )
        if w["flag"]:
            say(f"      {w['flag']}")


def _say_schedule(health: dict[str, Any]) -> None:
    """What starts the project's nights, and what is running now."""
    next_wake = health["next_wake"]
    if next_wake:
        by = ", ".join(health["scheduled_by"])
        say(f"  next scheduled night: {next_wake} (by {by})")
    elif health["scheduled_by"]:
        say(f"  nights are started by {', '.join(health['scheduled_by'])}")
    else:
        say(
            "  nothing schedules nights for this project (no daemon running, no enabled "
            "systemd timer, crontab line or launchd agent found): run `skillopt-sleep once`, "
            "or see `skillopt-sleep schedule --help`"
        )
    daemon = health["daemon"]
    if daemon:
        say(f"  daemon running: pid {daemon.get('pid')} on {daemon.get('host')}")
    night = health["night_in_progress"]
    if night:
        say(f"  night in progress: {night.get('command')} pid {night.get('pid')}")


def _say_proposals(
    args: argparse.Namespace, proposals: list[dict[str, Any]], edits: list[dict[str, Any]]
) -> None:
    """The proposals waiting to be adopted, and the ids of their kept edits."""
    if not proposals:
        say("no pending proposals")
        return
    how = again(args, "adopt")
    if any(p.get("fanout") for p in proposals):
        how += " --skill NAME` (repeatable) or `--all"
    say(f"pending proposals (adopt with `{how}`):")
    for p in proposals:
        say(f"  {p['name']} ({p['kind']}) -> {p['live_path']}  [{p['run_dir']}]")
    if len(edits) > 1:
        say("  their kept edits (adopt some with `--edit ID`, checked again first):")
        for e in edits:
            say(f"    {e['id']}  {e['target']}/{e['op']}: {e['content'][:100]}")


def run(args: argparse.Namespace) -> int:
    setup_logging(args)
    from skillopt_sleep.commands._runs import (
        kept_edits,
        pending,
        project_runs,
        recover_adoptions,
        run_summary,
        say_recovered,
        settle_dead_runs,
    )
    from skillopt_sleep.html import report_pages
    from skillopt_sleep.line_watch import watch_lines
    from skillopt_sleep.skills.managed import learned_skill_status
    from skillopt_sleep.state import StateStore

    try:
        cfg, project = load_config(args)
        recovered = recover_adoptions(cfg, project)
        state = StateStore(cfg.state_path()).load(project)
        runs = project_runs(cfg, project)
        nights = [run_summary(p) for p in runs[-SHOWN:]]
        proposals = [e for p in runs for e in pending(p)]
        edits = [e for p in runs for e in kept_edits(p)]
        health = _schedule_health(cfg, project)
        settle_dead_runs(nights, lock_held=health["night_in_progress"] is not None)
        archive = _archive_stats(cfg, project)
        learned = learned_skill_status(cfg, project)
        watched = [w.to_dict() for w in watch_lines(cfg, project)]
        pages = report_pages(runs)
    except known_errors() as exc:
        return refuse(args, type(exc).__name__, str(exc))
    from skillopt_sleep.model_change import model_advisory, model_key

    advisory = model_advisory(state.last_model_key, model_key(cfg.pool))
    data = {
        "ok": True,
        "project": str(project),
        "nights_run": state.night,
        "advisories": [advisory] if advisory else [],
        "recent": nights,
        "pending_proposals": proposals,
        "pending_edits": edits,
        "archive": archive,
        "learned_skill": learned,
        "watched_lines": watched,
        **pages,
        "recovered_adoptions": [r.to_dict() for r in recovered],
        **health,
    }
    if args.json:
        emit_json(data)
        return EXIT_OK
    say_recovered(recovered)
    say(f"project {project}: {state.night} night(s) run")
    if advisory:
        say(f"  warning: {advisory}")
    _say_archive(archive)
    _say_learned(learned)
    _say_watched(watched)
    _say_schedule(health)
    if not nights:
        say(f"  no nights yet: run `{again(args, 'once')}`")
    for n in nights:
        extra = f" — {n['reason']}" if n.get("reason") else ""
        dry = " (dry run)" if n.get("dry_run") else ""
        ended = f"{n['status']} / {n['outcome']}" if n.get("outcome") else n["status"]
        say(f"  {n['run_id']}: {ended}{dry}{extra}")
        if n.get("set_aside"):
            aside = ", ".join(n["set_aside"][:5])
            say(f"    set aside (calls kept failing, left untested): {aside}")
    if pages["report_index"]:
        say(f"  report: {pages['report_index']}")
    if pages["latest_report"]:
        say(f"  latest night's page: {pages['latest_report']}")
    elif runs:
        say("  no HTML report yet: `skillopt-sleep report` builds it")
    _say_proposals(args, proposals, edits)
    return EXIT_OK
