"""`skillopt-sleep session-end`: record a finished agent session so the next night reads it
first.

An agent's session-end hook runs it with the hook's JSON on stdin (the Claude Code
plugin's ``SessionEnd`` hook does; ``session_id``, ``transcript_path`` and ``cwd`` are
read, anything else ignored). It only appends a line to the state directory's record
(:mod:`skillopt_sleep.harvest.finished`): no model call, no transcript read, quick, and a
payload it cannot use is reported on stderr and recorded nowhere.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

from skillopt_sleep.commands._common import (
    EXIT_OK,
    add_config_args,
    emit_json,
    known_errors,
    refuse,
    say,
    setup_logging,
)

__all__ = ["HELP", "MAX_PAYLOAD", "NAME", "ORDER", "register", "run"]

NAME = "session-end"
HELP = "Record a finished agent session (hook JSON on stdin) so the next night reads it first."
ORDER = 62
MAX_PAYLOAD = 1 << 20


def register(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument(
        "--agent", default="claude", help="the agent whose hook runs this (default: claude)"
    )


def _payload() -> dict[str, Any]:
    raw = sys.stdin.buffer.read(MAX_PAYLOAD + 1) if sys.stdin is not None else b""
    if len(raw) > MAX_PAYLOAD:
        raise ValueError(f"the hook's input is over {MAX_PAYLOAD} bytes")
    try:
        data = json.loads(raw.decode("utf-8", "replace") or "{}")
    except RecursionError:  # nested deeper than the parser goes; not a hook's payload
        raise ValueError("the hook's input is nested too deeply to be read") from None
    if not isinstance(data, dict):
        raise ValueError("the hook's input is not a JSON object")
    return data


def run(args: argparse.Namespace) -> int:
    setup_logging(args)
    from skillopt_sleep.config import load_sleep_config
    from skillopt_sleep.harvest.finished import from_hook_payload, record_finished

    try:
        payload = _payload()
    except ValueError as exc:
        return refuse(args, "bad_hook_input", f"session-end: {exc}")
    cwd = str(args.project.expanduser().resolve()) if args.project else os.getcwd()
    session = from_hook_payload(payload, agent=str(args.agent), now=datetime.now(UTC), cwd=cwd)
    if session is None:
        return refuse(args, "bad_hook_input", "session-end: no session_id or transcript_path")
    try:
        cfg = load_sleep_config(args.config, overrides={"state_dir": _text(args.state_dir)})
        path = record_finished(cfg.state_path(), session)
    except (*known_errors(), OSError) as exc:  # type: ignore[misc]
        return refuse(args, "not_recorded", f"session-end: {exc}")
    if args.json:
        emit_json({"ok": True, "record": str(path), "session": session.to_dict()})
    else:
        say(f"recorded {session.session_id or session.transcript} in {path}")
    return EXIT_OK


def _text(value: object) -> str | None:
    return None if value is None else str(value)
