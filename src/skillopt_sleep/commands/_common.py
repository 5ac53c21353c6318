"""Shared plumbing for the night commands (``once``, ``dry-run``) and their output."""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skillopt.cli_support import log_level
from skillopt.errors import (
    ConfigError,
    CorruptStateError,
    DataError,
    LockHeldError,
    RefusedError,
    StorageError,
)
from skillopt.redact import redact_obj, sanitize
from skillopt_sleep.interrupts import treat_sigterm_as_interrupt

if TYPE_CHECKING:  # the config, logging and anyio load when a command runs, not for --help
    from skillopt_sleep.config import SleepConfig

__all__ = [
    "DEFAULT_PATIENCE",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_WAITING",
    "FLAG_KEYS",
    "FLAG_SOURCES",
    "add_config_args",
    "add_harvest_limits",
    "add_night_args",
    "again",
    "emit_json",
    "known_errors",
    "load_config",
    "overrides",
    "refuse",
    "run_async",
    "say",
    "say_demo_ignores",
    "self_command",
    "setup_logging",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2
EXIT_INTERRUPTED = 130
EXIT_WAITING = 75  # handoff mode: prompts wait for answers (= night.outcome.EXIT_WAITING)
DEFAULT_PATIENCE = 1800.0  # ``--wait`` alone: give up after 30 minutes with no answer landing


def emit_json(data: dict[str, Any]) -> None:
    """Exactly one JSON document on stdout (non-finite numbers become null)."""
    sys.stdout.write(json.dumps(redact_obj(_finite(data)), indent=2, sort_keys=True) + "\n")
    sys.stdout.flush()


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def say(text: str) -> None:
    sys.stdout.write(sanitize(text) + "\n")


def refuse(args: argparse.Namespace, error: str, message: str, code: int = EXIT_REFUSED) -> int:
    if getattr(args, "json", False):
        emit_json({"ok": False, "error": error, "message": sanitize(message)})
    else:
        sys.stderr.write(f"skillopt-sleep: {sanitize(message)}\n")
    return code


def add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="sleep.toml (default ~/.config/skillopt/)")
    parser.add_argument("--project", type=Path, help="the project directory (default: cwd)")
    parser.add_argument("--state-dir", type=Path, help="where runs and state are kept")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--log-level",
        type=log_level,
        default=None,
        help="DEBUG, INFO, WARNING, ERROR (default: INFO; WARNING on a TTY)",
    )


def add_harvest_limits(parser: argparse.ArgumentParser) -> None:
    """How much one harvest reads: the window and the per-night caps (``once``, ``harvest``)."""
    parser.add_argument(
        "--lookback-hours",
        type=float,
        metavar="H",
        help="harvest the sessions of the last H hours this time (0 = all history); older "
        "pending sessions stay pending",
    )
    parser.add_argument(
        "--max-sessions", type=int, metavar="N", help="read at most N sessions (the rest wait)"
    )
    parser.add_argument(
        "--max-tasks", type=int, metavar="N", help="work on at most N tasks (the rest wait)"
    )


def add_night_args(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    add_harvest_limits(parser)
    parser.add_argument(
        "--demo",
        action="store_true",
        help="bundled demo project, mock backend (with --state-dir DIR: kept in DIR, and each "
        "run is the demo's next night)",
    )
    parser.add_argument("--tasks-file", type=Path, help="a reviewed tasks file instead of harvest")
    parser.add_argument("--rounds", type=int, help="rollout -> reflect -> trial iterations")
    parser.add_argument("--dream-rollouts", type=int, help="K samples per train task")
    parser.add_argument("--edit-budget", type=int, help="max edits per reflection (0 allowed)")
    parser.add_argument("--max-calls", type=int, help="per-night cap on model calls (0 = none)")
    parser.add_argument("--max-tokens", type=int, help="per-night cap on tokens (0 = none)")
    parser.add_argument("--preferences", help="house rules for the optimizer to respect")


#: The config key each flag overrides (an error about the value names the flag).
FLAG_KEYS = {
    "--state-dir": "state_dir",
    "--rounds": "night.rounds",
    "--dream-rollouts": "night.dream_rollouts",
    "--edit-budget": "night.edit_budget",
    "--preferences": "night.preferences",
    "--max-calls": "budget.max_calls",
    "--max-tokens": "budget.max_tokens",
    "--lookback-hours": "sources.lookback_hours",
    "--max-sessions": "sources.max_sessions",
    "--max-tasks": "night.max_tasks",
}
FLAG_SOURCES = {key: f"the {flag} flag" for flag, key in FLAG_KEYS.items()}


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for flag, key in FLAG_KEYS.items():
        value = getattr(args, flag.removeprefix("--").replace("-", "_"), None)
        out[key] = str(value) if isinstance(value, Path) else value
    if out.get("sources.lookback_hours") is not None:
        out["sources.rolling_window"] = True  # a window given on the command line rolls
    return out


def self_command() -> str:
    """How the user can run us again: the bare name if it is on PATH, else its full path
    (``make demo`` runs ``.venv/bin/skillopt-sleep`` without activating the venv)."""
    here = Path(sys.executable).parent / "skillopt-sleep"
    found = shutil.which("skillopt-sleep")
    if found and here.exists() and Path(found).resolve() == here.resolve():
        return "skillopt-sleep"
    return shlex.quote(str(here.absolute())) if here.exists() else "skillopt-sleep"


def again(args: argparse.Namespace, command: str, *extra: str) -> str:
    """The command line that runs ``command`` on the config, state dir and project this
    command used (the flags the user gave, as absolute paths), so a printed hint finds
    what this command made."""
    argv = [command]
    for flag in ("--config", "--state-dir", "--project"):
        value = getattr(args, flag.removeprefix("--").replace("-", "_"), None)
        if isinstance(value, Path):
            argv += [flag, str(value.expanduser().absolute())]
    return f"{self_command()} {shlex.join([*argv, *extra])}"


def setup_logging(args: argparse.Namespace) -> None:
    """Logs go to the process's own stderr (stable even if ``sys.stderr`` is swapped)."""
    from skillopt.logging import configure_logging

    stream = sys.__stderr__ or sys.stderr
    level = getattr(args, "log_level", None) or ("WARNING" if stream.isatty() else "INFO")
    configure_logging(level=str(level), stream=stream)


def load_config(args: argparse.Namespace) -> tuple[SleepConfig, Path]:
    """The config and project for a command, from flags > env > file > defaults."""
    from skillopt_sleep.config import SleepConfig, load_sleep_config

    if getattr(args, "demo", False):
        from skillopt_sleep.demo import demo_in

        say_demo_ignores(args)
        setup = demo_in(getattr(args, "state_dir", None))  # --state-dir keeps the demo
        data = setup.config.model_dump(mode="json")
        cfg = SleepConfig.model_validate(data)
        extra = {k: v for k, v in overrides(args).items() if v is not None and k != "state_dir"}
        if extra:
            from skillopt.config import load_toml_model

            cfg = load_toml_model(None, SleepConfig, overrides={**data, **extra})
        return cfg, setup.project
    cfg = load_sleep_config(
        getattr(args, "config", None), overrides=overrides(args), override_sources=FLAG_SOURCES
    )
    project = (getattr(args, "project", None) or Path.cwd()).expanduser().resolve()
    if not project.is_dir():
        raise ConfigError(f"{project} is not a directory", key="--project")
    return cfg, project


def say_demo_ignores(args: argparse.Namespace) -> None:
    """``--demo`` runs on its own config, project and state: say what it leaves unread."""
    from skillopt.logging import get_logger
    from skillopt_sleep.config import ENV_PREFIX

    ignored = [
        flag
        for flag in ("--config", "--project")  # --state-dir keeps the demo there
        if getattr(args, flag.removeprefix("--").replace("-", "_"), None)
    ]
    ignored += sorted(n for n in os.environ if n.upper().startswith(ENV_PREFIX))
    if ignored:
        get_logger(__name__).warning(
            "demo.ignored",
            ignored=ignored,
            reason="--demo runs on its own config and project (in a temp dir, or in "
            "--state-dir); of your settings only --state-dir and the night flags (--rounds, "
            "--max-calls, ...) apply",
        )


def known_errors() -> tuple[type[BaseException], ...]:
    return (ConfigError, DataError, CorruptStateError, LockHeldError, RefusedError, StorageError)


def run_async(fn: Any, *a: Any) -> Any:
    """``anyio.run``; SIGTERM stays an interruption once the loop has closed (its signal
    receivers put back the default action, which would kill the process silently)."""
    import anyio

    try:
        return anyio.run(fn, *a)
    finally:
        treat_sigterm_as_interrupt()
