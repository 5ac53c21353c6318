"""`skillopt-sleep harvest`: preview what the next night would learn from, widen the harvest
window, or make sessions pending again.

Without flags it reads the sessions the next night would (pending ones, in the harvest
window, at most ``sources.max_sessions``) and mines them with the same miner: the LLM
miner (one optimizer call per session) when the night would use it, unless ``--no-llm``.
LLM mining results go to the project's mining cache, so the next night does not pay for
them again. Nothing is marked harvested. ``--output`` writes the night's task set (new and
recalled tasks) as a draft tasks file (``reviewed: false``): review it, set
``"reviewed": true``, then ``skillopt-sleep once --tasks-file tasks.json``.

- ``--since DATE`` sets the start of the harvest window to DATE (an ISO date or instant,
  UTC unless it names an offset): pending sessions since DATE are harvested by the next
  nights, older ones are left alone.
- ``--reset`` forgets that sessions were harvested, so the next nights read them again:
  with ``--since DATE`` those whose file changed after DATE, else all of them (and the
  window starts over from ``sources.lookback_hours``). Tasks already mined stay in the
  archive; mining results are reused from the cache.
- ``--lookback-hours H``, ``--max-sessions N``, ``--max-tasks N``: this preview's window
  (the last H hours; older pending sessions stay pending) and caps, as for ``once``.
- ``--scope all`` previews every project's sessions of the lookback window with the
  heuristic miner, grouped by project. It reads no archive and changes nothing, so it
  does not combine with ``--since``, ``--reset`` or ``--output``.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from skillopt.errors import ConfigError
from skillopt_sleep.commands._common import (
    EXIT_OK,
    add_config_args,
    add_harvest_limits,
    again,
    emit_json,
    known_errors,
    load_config,
    refuse,
    say,
    setup_logging,
)

if TYPE_CHECKING:
    from skillopt_sleep.config import SleepConfig
    from skillopt_sleep.night.gather_tasks import Gathered, ProjectPreview
    from skillopt_sleep.skills.route import Route, Routing
    from skillopt_sleep.tasks.archive import TaskArchive

__all__ = ["HELP", "NAME", "ORDER", "SCOPES", "parse_date", "register", "run"]

NAME = "harvest"
HELP = "Preview the next night's tasks; widen (--since) or redo (--reset) the harvest."
ORDER = 40


SCOPES = ("project", "all")


def register(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    add_harvest_limits(parser)
    parser.add_argument(
        "--scope",
        choices=SCOPES,
        default="project",
        help="project (default): this project's next night; all: every project's sessions, "
        "a preview that changes nothing",
    )
    parser.add_argument("--output", type=Path, help="write the draft tasks file here")
    parser.add_argument(
        "--no-llm",
        action="store_true",
        help="heuristic miner only (no model calls), even where the night uses the LLM miner",
    )
    parser.add_argument(
        "--since",
        metavar="DATE",
        help="start the harvest window at DATE (e.g. 2026-11-01): older pending sessions "
        "were left out, these are harvested by the next nights",
    )
    parser.add_argument(
        "--reset",
        action="store_true",
        help="make harvested sessions pending again (those changed after --since DATE, or all)",
    )


def parse_date(text: str) -> datetime:
    """An ISO date or instant; naive means UTC."""
    from skillopt_sleep.harvest import parse_instant

    moment = parse_instant(text) if not text.strip().lstrip("-").isdigit() else None
    if moment is None:
        raise ConfigError(
            f"{text!r} is not a date: use an ISO date such as 2026-11-01 or an instant such "
            "as 2026-11-01T08:00:00+01:00",
            key="--since",
        )
    return moment


def run(args: argparse.Namespace) -> int:
    setup_logging(args)
    if args.scope == "all":
        return _run_all(args)
    from skillopt_sleep.state import project_dir
    from skillopt_sleep.tasks.archive import archive_path, open_archive

    try:
        since = parse_date(args.since) if args.since else None
        cfg, project = load_config(args)
        now = datetime.now(UTC)
        path = archive_path(project_dir(cfg.state_path(), project))
        with open_archive(path, now=now) as archive:
            changes = _apply_flags(archive, args, since)
            got = anyio.run(_preview, cfg, project, archive, not args.no_llm, now)
            if changes:  # the window moved: the last night's pending counts are stale
                archive.recount_pending(
                    backlog=got.n_sessions + got.backlog,
                    outside_window=got.outside_window,
                    by=_flags_used(args),
                )
        skills, routing = _routes(cfg, project, got)
        if args.output:
            _write_draft(args.output, got, project, now)
    except known_errors() as exc:
        return refuse(args, type(exc).__name__, str(exc))
    if args.json:
        emit_json(
            {
                "ok": True,
                "changes": changes,
                "n_sessions": got.n_sessions,
                "n_recalled": got.n_recalled,
                "model_calls": _mining_calls(got),
                "backlog": got.backlog,
                "outside_window": got.outside_window,
                "why_nothing": got.why_nothing,
                "notes": list(got.notes),
                "output": str(args.output) if args.output else None,
                "tasks": [t.to_dict() for t in got.tasks],
                "skills": skills,
                "routes": routing.to_list(),
                "diagnostics": got.diagnostics,
            }
        )
        return EXIT_OK
    for change in changes:
        say(change)
    _say_preview(got, args.output, args, skills, routing)
    return EXIT_OK


def _routes(cfg: SleepConfig, project: Path, got: Gathered) -> tuple[list[str], Routing]:
    """Where the night would send each learnable task among the project's own skills."""
    from skillopt.types import Split
    from skillopt_sleep.night.skills.fanout import preview_routes

    return preview_routes(cfg, project, [t for t in got.tasks if t.split is not Split.TEST])


def _flags_used(args: argparse.Namespace) -> str:
    flags = [f for f, on in (("--reset", args.reset), ("--since", args.since)) if on]
    return " ".join(["harvest", *flags])


def _apply_flags(
    archive: TaskArchive, args: argparse.Namespace, since: datetime | None
) -> list[str]:
    changes = []
    if args.reset:
        forgotten = archive.forget_harvested(since=since)
        scope = f"changed after {since.isoformat()}" if since else "(all)"
        changes.append(f"{forgotten} harvested session(s) {scope} are pending again")
    if since is not None:
        archive.set_window_start(since)
        changes.append(f"the harvest window now starts at {since.isoformat()}")
    return changes


async def _preview(
    cfg: SleepConfig, project: Path, archive: TaskArchive, llm_allowed: bool, now: datetime
) -> Gathered:
    from skillopt.backends.open import open_completer
    from skillopt_sleep.night.gather_tasks import gather_night, uses_llm_miner

    if not (llm_allowed and uses_llm_miner(cfg)):
        return await gather_night(
            cfg, project=project, archive=archive, pool=None, use_llm=False, now=now
        )
    assert cfg.pool is not None  # uses_llm_miner checked it
    async with open_completer(cfg.pool) as pool:
        return await gather_night(
            cfg, project=project, archive=archive, pool=pool, use_llm=True, now=now
        )


def _write_draft(output: Path, got: Gathered, project: Path, now: datetime) -> None:
    from skillopt_sleep.mining.tasks_file import write_tasks_file

    metadata: dict[str, Any] = {
        "project": str(project),
        "source": got.source,
        "n_sessions": got.n_sessions,
    }
    write_tasks_file(output, got.tasks, generated_at=now, metadata=metadata)


def _mining_calls(got: Gathered) -> int:
    """Model calls this preview paid for (sessions mined before come from the cache)."""
    return int(got.diagnostics.get("mine", {}).get("calls", 0) or 0)


def _say_preview(
    got: Gathered,
    output: Path | None,
    args: argparse.Namespace,
    skills: list[str],
    routing: Routing,
) -> None:
    mine = got.diagnostics.get("mine", {})
    new = len(got.tasks) - got.n_recalled
    say(
        f"{got.n_sessions} session(s) -> {new} new task(s) (miner: {mine.get('miner', '?')}), "
        f"{got.n_recalled} recalled from the archive"
    )
    if "cached" in mine:
        say(
            f"  model calls: {_mining_calls(got)} ({mine['cached']} session(s) from the mining "
            "cache; the next night reuses these results; --no-llm spends nothing)"
        )
    if got.why_nothing:
        say(f"  nothing to learn from: {got.why_nothing}")
    for note in got.notes:
        say(f"  {note}")
    if skills:
        say(f"  {len(skills)} project skill(s) a night learns on: {', '.join(skills)}")
    routes = {r.task_id: r for r in routing.routes}
    for t in got.tasks:
        say(f"  [{t.split.value}/{t.origin.value}] {' '.join(t.intent.split())[:90]}")
        if skills:
            say(f"      -> {_destination(routes.get(t.id))}")
    if output:
        again_once = again(args, "once", "--tasks-file", str(output.expanduser().absolute()))
        say(f"draft written to {output}: review it, set \"reviewed\": true, then run "
            f"`{again_once}`")  # fmt: skip


def _destination(route: Route | None) -> str:
    """Which skill a task would go to and why, for the preview's task lines."""
    if route is None:
        return "held out to score the night (test split), not routed"
    where = f"skill {route.skill}" if route.skill else "the managed skill"
    return f"{where}: {route.why}"


def _run_all(args: argparse.Namespace) -> int:
    """``--scope all``: every project's sessions, heuristic miner, nothing recorded."""
    from skillopt_sleep.night.gather_tasks import preview_all_projects

    given = [flag for flag, on in (("--since", args.since), ("--reset", args.reset),
                                   ("--output", args.output)) if on]  # fmt: skip
    try:
        if given:
            raise ConfigError(
                f"--scope all is a preview of every project and changes nothing: it cannot "
                f"take {', '.join(given)} (use them with a --project)",
                key="--scope",
            )
        cfg, _ = load_config(args)
        previews, result = preview_all_projects(cfg, now=datetime.now(UTC))
    except known_errors() as exc:
        return refuse(args, type(exc).__name__, str(exc))
    if args.json:
        emit_json(
            {
                "ok": True,
                "scope": "all",
                "n_sessions": len(result.digests),
                "projects": [
                    {
                        "project": p.project,
                        "n_sessions": p.n_sessions,
                        "tasks": [t.to_dict() for t in p.tasks],
                    }
                    for p in previews
                ],
                "diagnostics": {"harvest": result.diagnostics.to_dict()},
            }
        )
        return EXIT_OK
    _say_all(previews, len(result.digests), cfg.sources.lookback_hours)
    return EXIT_OK


def _say_all(previews: tuple[ProjectPreview, ...], n_sessions: int, hours: float) -> None:
    window = f"the last {hours:g}h" if hours > 0 else "all history"
    say(f"{n_sessions} session(s) in {len(previews)} project(s), {window} "
        "(miner: heuristic; a preview: nothing is recorded)")  # fmt: skip
    for preview in previews:
        say(f"{preview.project or '(no working directory)'}: {preview.n_sessions} session(s) "
            f"-> {len(preview.tasks)} task(s)")  # fmt: skip
        for t in preview.tasks:
            say(f"  {' '.join(t.intent.split())[:90]}")
