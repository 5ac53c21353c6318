"""`skillopt-sleep` command line.

Each subcommand lives in its own module under :mod:`skillopt_sleep.commands` and exposes
``NAME``, ``HELP``, ``ORDER`` (position in ``--help``), ``register(parser)`` and
``run(args) -> int``. Exit codes: 0 ok, 1 failed night, 2 refused/usage, 75 a handoff night
waiting for answers (docs/handoff.md), 130 interrupted (Ctrl-C, or SIGTERM at any point: the
handler is installed before the slow imports).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from skillopt_sleep.interrupts import (
    exit_130_on_sigterm,
    forget_interrupt_in_exec,
    treat_sigterm_as_interrupt,
)

if TYPE_CHECKING:
    import argparse
    from types import ModuleType

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_WAITING",
    "build_parser",
    "main",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2
EXIT_INTERRUPTED = 130
EXIT_WAITING = 75  # a handoff night waits for answers (night.outcome.EXIT_WAITING)
EXIT_CODES = (
    "exit codes: 0 ok (whatever the gate decided), 1 failed night, 2 refused or usage error, "
    "75 a handoff night waiting for answers, 130 interrupted"
)


def _command_modules() -> list[ModuleType]:
    import importlib
    import pkgutil

    from skillopt_sleep import commands

    found = [
        importlib.import_module(f"{commands.__name__}.{info.name}")
        for info in pkgutil.iter_modules(commands.__path__)
        if not info.name.startswith("_")
    ]
    return sorted(found, key=lambda mod: (getattr(mod, "ORDER", 100), mod.NAME))


def _named_command(argv: list[str]) -> ModuleType | None:
    """The module of the command ``argv`` names, imported alone (``None`` when ``argv``
    names none we can find by its module name: then every command is loaded).

    Each command imports what it needs at the top, so loading all of them to build the
    parser would import the scheduler, the HTTP stack and the night for ``status``.
    """
    import importlib

    from skillopt_sleep import commands

    name = argv[0] if argv else ""
    if not name or name.startswith("-"):
        return None
    for candidate in (name.replace("-", "_"), f"{name.replace('-', '_')}_cmd"):
        if not candidate.isidentifier() or candidate.startswith("_"):
            return None
        try:
            module = importlib.import_module(f"{commands.__name__}.{candidate}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{commands.__name__}.{candidate}":
                raise
            continue
        if getattr(module, "NAME", None) == name:
            return module
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or only of the one ``argv`` names (faster start)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="skillopt-sleep",
        description="Nightly, validation-gated improvement of your coding agent's skill documents.",
        epilog=EXIT_CODES,
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    named = _named_command(argv) if argv is not None else None
    for module in [named] if named is not None else _command_modules():
        sub = subparsers.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.register(sub)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        treat_sigterm_as_interrupt()
        if argv is None:
            argv = sys.argv[1:]
        parser = build_parser(argv)
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
            return int(exc.code or 0)
        if not getattr(args, "_run", None):
            parser.print_help()
            return EXIT_REFUSED
        return int(args._run(args))
    except BrokenPipeError:
        from skillopt.cli_support import quiet_broken_pipe

        return quiet_broken_pipe()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (OSError, BaseExceptionGroup) as exc:  # a full disk, a read-only state dir
        return _storage_failure(exc, argv or [])
    finally:
        forget_interrupt_in_exec()  # an interruption handled anywhere below stays 130
        exit_130_on_sigterm()  # what is left is interpreter shutdown


def _storage_failure(exc: BaseException, argv: list[str]) -> int:
    """Say what a failed write of our files needs (exit 2); anything else is a bug, raised."""
    from skillopt.storage_errors import storage_failures
    from skillopt_sleep.commands._common import emit_json

    failure = storage_failures(exc)
    if failure is None:
        raise exc
    if "--json" in argv:
        emit_json({"ok": False, "error": "StorageError", "message": str(failure)})
    else:
        print(f"skillopt-sleep: {failure}", file=sys.stderr)
    return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
