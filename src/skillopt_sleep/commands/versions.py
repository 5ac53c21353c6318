"""`skillopt-sleep versions`: the skill store (every version a night staged) as a history.

``versions [--skill NAME]`` lists them (night, score, parent, adopted, live);
``versions show V`` prints one, ``versions diff V1 V2`` compares two, and
``versions restore V`` puts one back as the live skill through the ordinary adoption
(sha pins, confinement, backup, all or nothing, a receipt). ``V`` is ``SKILL@N``, or
``N`` / ``vN`` with ``--skill`` (or when the store holds a single skill).
"""

from __future__ import annotations

import argparse
import sys

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

__all__ = ["ACTIONS", "HELP", "NAME", "ORDER", "register", "run"]

NAME = "versions"
HELP = "List, show, diff or restore the versions of your skills that nights staged."
ORDER = 27
ACTIONS = ("list", "show", "diff", "restore")
_REFS = {"list": 0, "show": 1, "diff": 2, "restore": 1}


def register(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument(
        "action",
        nargs="?",
        default="list",
        choices=ACTIONS,
        help="list (default), show V, diff V1 V2, restore V",
    )
    parser.add_argument("refs", nargs="*", metavar="V", help="a version: SKILL@N, N or vN")
    parser.add_argument("--skill", metavar="NAME", help="this skill's versions only")


def run(args: argparse.Namespace) -> int:
    setup_logging(args)
    from skillopt.errors import AdoptionError
    from skillopt_sleep import versions

    want = _REFS[args.action]
    if len(args.refs) != want:
        problem = f"versions {args.action} takes {want} version(s), got {len(args.refs)}"
        return refuse(args, "invalid_arguments", problem)
    try:
        cfg, project = load_config(args)
        refs = [versions.parse_ref(r, cfg, project, args.skill) for r in args.refs]
        if args.action == "list":
            rows = versions.list_versions(cfg, project, args.skill)
            if args.json:
                emit_json({"ok": True, "versions": [r.to_dict() for r in rows]})
            else:
                _say_rows([r.to_dict() for r in rows])
        elif args.action == "show":
            text = versions.read_version(cfg, project, *refs[0])
            if args.json:
                emit_json({"ok": True, "skill": refs[0][0], "version": refs[0][1], "text": text})
            else:
                sys.stdout.write(text)
        elif args.action == "diff":
            diff = versions.diff_versions(cfg, project, refs[0], refs[1])
            if args.json:
                emit_json({"ok": True, "diff": diff})
            else:
                sys.stdout.write(diff or "(no difference)\n")
        else:
            result = versions.restore(cfg, project, *refs[0])
            if args.json:
                emit_json({"ok": True, "restored": refs[0][0], "version": refs[0][1],
                           **result.to_dict()})  # fmt: skip
            else:
                for a in result.adopted:
                    say(f"restored {a.name} v{refs[0][1]} -> {a.live_path} (backup: "
                        f"{a.backup_path or 'none, the file did not exist'})")  # fmt: skip
    except AdoptionError as exc:
        return refuse(args, "adoption_failed", str(exc), EXIT_FAILED)
    except known_errors() as exc:
        return refuse(args, type(exc).__name__, str(exc), EXIT_REFUSED)
    return EXIT_OK


def _say_rows(rows: list[dict[str, object]]) -> None:
    if not rows:
        say("no versions yet: a night stores one each time it stages a skill")
        return
    say(f"{'skill':<24} {'ver':>4} {'night':>5} {'score':>6} {'parent':>6}  status")
    for r in rows:
        score = r["score"]
        shown = f"{score:.3f}" if isinstance(score, float) else "-"
        status = ", ".join(s for s, on in (("adopted", r["adopted"]), ("live", r["live"])) if on)
        say(f"{r['skill']!s:<24} {r['version']!s:>4} {r['night']!s:>5} {shown:>6} "
            f"{r['parent'] or '-'!s:>6}  {status or 'staged'}")  # fmt: skip
