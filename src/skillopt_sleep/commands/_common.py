"""Shared plumbing for the night commands (``once``, ``dry-run``) and their output."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import anyio

from skillopt.errors import (
    ConfigError,
    CorruptStateError,
    DataError,
    LockHeldError,
    RefusedError,
)
from skillopt.logging import configure_logging
from skillopt.redact import redact_obj, sanitize
from skillopt_sleep.config import SleepConfig, load_sleep_config

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2
EXIT_INTERRUPTED = 130


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
        "--log-level", default=None, help="DEBUG, INFO, WARNING (default: INFO; WARNING on a TTY)"
    )


def add_night_args(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument("--demo", action="store_true", help="bundled demo project, mock backend")
    parser.add_argument("--tasks-file", type=Path, help="a reviewed tasks file instead of harvest")
    parser.add_argument("--rounds", type=int, help="rollout -> reflect -> trial iterations")
    parser.add_argument("--dream-rollouts", type=int, help="K samples per train task")
    parser.add_argument("--edit-budget", type=int, help="max edits per reflection (0 allowed)")
    parser.add_argument("--max-calls", type=int, help="per-night cap on model calls (0 = none)")
    parser.add_argument("--max-tokens", type=int, help="per-night cap on tokens (0 = none)")
    parser.add_argument("--preferences", help="house rules for the optimizer to respect")


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "state_dir": str(args.state_dir) if getattr(args, "state_dir", None) else None,
        "night.rounds": getattr(args, "rounds", None),
        "night.dream_rollouts": getattr(args, "dream_rollouts", None),
        "night.edit_budget": getattr(args, "edit_budget", None),
        "night.preferences": getattr(args, "preferences", None),
        "budget.max_calls": getattr(args, "max_calls", None),
        "budget.max_tokens": getattr(args, "max_tokens", None),
    }


def setup_logging(args: argparse.Namespace) -> None:
    """Logs go to the process's own stderr (stable even if ``sys.stderr`` is swapped)."""
    stream = sys.__stderr__ or sys.stderr
    level = getattr(args, "log_level", None) or ("WARNING" if stream.isatty() else "INFO")
    configure_logging(level=str(level), stream=stream)


def load_config(args: argparse.Namespace) -> tuple[SleepConfig, Path]:
    """The config and project for a command, from flags > env > file > defaults."""
    if getattr(args, "demo", False):
        from skillopt_sleep.demo import demo_in

        setup = demo_in(getattr(args, "state_dir", None))  # --state-dir keeps the demo
        data = setup.config.model_dump(mode="json")
        cfg = SleepConfig.model_validate(data)
        extra = {k: v for k, v in overrides(args).items() if v is not None and k != "state_dir"}
        if extra:
            from skillopt.config import load_toml_model

            cfg = load_toml_model(None, SleepConfig, overrides={**data, **extra})
        return cfg, setup.project
    cfg = load_sleep_config(getattr(args, "config", None), overrides=overrides(args))
    project = (getattr(args, "project", None) or Path.cwd()).expanduser().resolve()
    return cfg, project


def known_errors() -> tuple[type[BaseException], ...]:
    return (ConfigError, DataError, CorruptStateError, LockHeldError, RefusedError)


def run_async(fn: Any, *a: Any) -> Any:
    return anyio.run(fn, *a)
