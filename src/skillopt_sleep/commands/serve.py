"""`skillopt-sleep serve`: the local dashboard (pages of every project, and actions)."""

from __future__ import annotations

import argparse
import sys
import webbrowser

from skillopt.redact import sanitize
from skillopt_sleep.commands._common import (
    EXIT_OK,
    EXIT_REFUSED,
    add_config_args,
    known_errors,
    load_config,
    refuse,
    run_async,
    say,
    setup_logging,
)

__all__ = ["DEFAULT_PORT", "HELP", "NAME", "ORDER", "register", "run"]

NAME = "serve"
HELP = "Serve a local dashboard on 127.0.0.1: every project's nights, and adopt/restore/start."
ORDER = 23
DEFAULT_PORT = 8767


def register(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on: 127.0.0.1 (or localhost) only, anything else is refused",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0 = any free"
    )
    parser.add_argument("--open", action="store_true", help="open the dashboard in your browser")


def run(args: argparse.Namespace) -> int:
    setup_logging(args)
    from skillopt_sleep.serve.guard import Guard
    from skillopt_sleep.serve.server import bind, serve

    try:
        sock = bind(args.host, args.port)
    except ValueError as exc:
        return refuse(args, "not_loopback", f"refused --host {args.host}: {exc}")
    except OSError as exc:
        return refuse(args, "bind_failed", f"cannot listen on {args.host}:{args.port}: {exc}")

    def ready(guard: Guard) -> None:
        where = sanitize(str(cfg.state_path()))
        # not through say(): its redaction would hide the token the user needs
        sys.stdout.write(f"skillopt-sleep dashboard for {where}: {guard.url()}\n")
        say("(serves this machine only; the token in the URL is this launch's; Ctrl-C stops)")
        sys.stdout.flush()
        if args.open:
            webbrowser.open(guard.url())

    try:
        cfg, _ = load_config(args)
        run_async(serve, cfg, sock, ready)
    except KeyboardInterrupt:
        return EXIT_OK
    except known_errors() as exc:
        return refuse(args, type(exc).__name__, str(exc), EXIT_REFUSED)
    finally:
        sock.close()
    return EXIT_OK
