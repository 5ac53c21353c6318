"""`skillopt-sleep adopt`: copy a night's staged proposal over the live files, safely.

A thin wrapper over :func:`skillopt_sleep.adopt.adopt`: sha pins against the live file
(refused if it changed since the night read it), confinement to the skill roots, backups,
all-or-nothing replacement with rollback, append-only receipts.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from skillopt_sleep.commands._common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    add_config_args,
    emit_json,
    known_errors,
    load_config,
    refuse,
    say,
    setup_logging,
)

__all__ = ["HELP", "NAME", "ORDER", "register", "run"]

NAME = "adopt"
HELP = "Adopt a staged proposal: replace the live skill/memory with it (pinned, with backup)."
ORDER = 25


def register(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument("--run", type=Path, help="the night's run directory (default: latest)")
    parser.add_argument(
        "--skill",
        "--only",
        dest="only",
        action="append",
        metavar="NAME",
        help="adopt only this proposal (repeatable); a night with per-skill proposals needs "
        "it (or --all)",
    )
    parser.add_argument(
        "--edit",
        action="append",
        metavar="ID",
        help="adopt only this kept edit of the managed skill / memory (repeatable; ids in "
        "`status` and the report): the subset is checked against the live documents first, "
        "as the night's final check (model calls; how many is said before), and adopted "
        "only if it passes",
    )
    parser.add_argument(
        "--all",
        "--all-skills",
        dest="every",
        action="store_true",
        help="adopt every proposal of the night not adopted yet",
    )


def run(args: argparse.Namespace) -> int:
    setup_logging(args)
    from skillopt.errors import AdoptionError, SelectionRequiredError
    from skillopt_sleep.commands._runs import adopt_pending, recover_adoptions, say_recovered

    problem = _selection_problem(args)
    if problem:
        return refuse(args, "invalid_selection", problem, EXIT_REFUSED)
    if args.edit:
        from skillopt_sleep.commands._adopt_edits import adopt_edits

        return adopt_edits(args)
    try:
        cfg, project = load_config(args)
        recovered = recover_adoptions(cfg, project)
        say_recovered([] if args.json else recovered)
        result = adopt_pending(cfg, project, args.run, args.only, every=args.every)
        if result is None:
            return _nothing_to_adopt(args, recovered)
        if result.recovered is not None:
            recovered.append(result.recovered)
            say_recovered([] if args.json else [result.recovered])
    except AdoptionError as exc:
        return refuse(args, "adoption_failed", str(exc), EXIT_FAILED)
    except SelectionRequiredError as exc:
        return _selection_required(args, exc.names, str(exc))
    except known_errors() as exc:
        return refuse(args, type(exc).__name__, str(exc), EXIT_REFUSED)
    files = [
        {"name": a.name, "kind": a.kind, "live_path": a.live_path, "backup": a.backup_path}
        for a in result.adopted
    ]
    if args.json:
        emit_json(
            {
                "ok": True,
                "run_dir": str(result.run_dir),
                "adopted": files,
                "recovered_adoptions": [r.to_dict() for r in recovered],
            }
        )
        return EXIT_OK
    for f in files:
        backup = f" (backup: {f['backup']})" if f["backup"] else ""
        say(f"adopted {f['name']} -> {f['live_path']}{backup}")
    return EXIT_OK


def _selection_problem(args: argparse.Namespace) -> str:
    """What is wrong with the names asked for, before anything is read or written."""
    names = args.only or []
    if args.every and names:
        return "--skill/--only and --all are exclusive: name proposals, or take them all"
    if any(not n.strip() for n in names):
        return "--skill needs a proposal name"
    edits = getattr(args, "edit", None) or []
    if edits and (names or args.every):
        return "--edit chooses edits of the managed skill and memory: not with --skill or --all"
    if any(not e.strip() for e in edits):
        return "--edit needs an edit id"
    return ""


def _selection_required(args: argparse.Namespace, names: tuple[str, ...], message: str) -> int:
    """A night with per-skill proposals: list them, adopt nothing, exit 2."""
    if args.json:
        emit_json(
            {
                "ok": False,
                "error": "selection_required",
                "message": message,
                "available": list(names),
            }
        )
    else:
        say("this night proposes:")
        for name in names:
            say(f"  {name}")
        say("adopt some with --skill NAME (repeatable), or all of them with --all")
    return EXIT_REFUSED


def _nothing_to_adopt(args: argparse.Namespace, recovered: list[Any]) -> int:
    """Not an error: `once && adopt` in a crontab must not fail on a night that kept nothing."""
    message = "nothing to adopt: no night has a proposal waiting"
    if args.json:
        emit_json(
            {
                "ok": True,
                "adopted": [],
                "nothing_to_adopt": True,
                "message": message,
                "recovered_adoptions": [r.to_dict() for r in recovered],
            }
        )
    else:
        say(message)
    return EXIT_OK
