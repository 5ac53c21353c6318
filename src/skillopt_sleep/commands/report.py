"""`skillopt-sleep report`: (re)build a night's HTML page and the index across nights."""

from __future__ import annotations

import argparse
import webbrowser

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

__all__ = ["HELP", "NAME", "ORDER", "register", "run"]

NAME = "report"
HELP = "Build the HTML report of a night and the index across nights; print or open its path."
ORDER = 22


def register(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument(
        "--night",
        metavar="RUN",
        help="a run directory, its name, or a night number (default: the latest run)",
    )
    parser.add_argument(
        "--open", action="store_true", help="open the page in your web browser afterwards"
    )


def run(args: argparse.Namespace) -> int:
    setup_logging(args)
    from skillopt_sleep.commands._runs import find_run, project_runs
    from skillopt_sleep.html import project_dir_of
    from skillopt_sleep.html.render import build_index, build_night

    try:
        cfg, project = load_config(args)
        runs = project_runs(cfg, project)
        chosen = find_run(runs, args.night)
        if chosen is None:
            what = f"no run matches {args.night!r}" if args.night else "no night has run yet"
            return refuse(args, "no_run", f"{what} for {project}")
        page = build_night(chosen)
        index = build_index(project_dir_of(chosen))
    except known_errors() as exc:
        return refuse(args, type(exc).__name__, str(exc))
    except OSError as exc:
        return refuse(args, "write_failed", f"could not write the report: {exc}")
    opened = bool(args.open) and webbrowser.open(page.as_uri())
    if args.json:
        emit_json({"ok": True, "night_page": str(page), "index": str(index), "opened": opened})
        return EXIT_OK
    say(f"night page: {page}")
    say(f"all nights: {index}")
    if args.open and not opened:
        say("(no web browser could be started; open the file above yourself)")
    return EXIT_OK
