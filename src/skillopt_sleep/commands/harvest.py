"""`skillopt-sleep harvest --output tasks.json`: mine tasks for review, as the next night would.

Reads the same window the next night would (the harvest cursor, else the first-night
lookback) and mines it with the same miner: the LLM miner (one optimizer call per session)
when the night would use it, unless ``--no-llm``. Writes a draft tasks file
(``reviewed: false``). Review it, edit it, set ``"reviewed": true``, then
``skillopt-sleep once --tasks-file tasks.json``.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

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

if TYPE_CHECKING:
    from skillopt_sleep.config import SleepConfig
    from skillopt_sleep.gather import Gathered

NAME = "harvest"
HELP = "Mine recent sessions into a reviewable tasks file, as the next night would."
ORDER = 40


def register(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument("--output", type=Path, help="write the draft tasks file here")
    parser.add_argument(
        "--no-llm",
        action="store_true",
        help="heuristic miner only (no model calls), even where the night uses the LLM miner",
    )


def run(args: argparse.Namespace) -> int:
    setup_logging(args)
    from skillopt_sleep.gather import gather, harvest_window_start, uses_llm_miner
    from skillopt_sleep.state import StateStore
    from skillopt_sleep.tasks_file import write_tasks_file

    try:
        cfg, project = load_config(args)
        state = StateStore(cfg.state_path()).load(project)
        now = datetime.now(UTC)
        since = harvest_window_start(cfg, state.harvest_cursor, now)
        if uses_llm_miner(cfg) and not args.no_llm:
            got = anyio.run(_llm_gather, cfg, project, since)
        else:
            got = gather(cfg, project=project, since=since)
        if args.output:
            write_tasks_file(
                args.output,
                got.tasks,
                generated_at=now,
                metadata={"project": str(project), "source": got.source,
                          "n_sessions": got.n_sessions},
            )  # fmt: skip
    except known_errors() as exc:
        return refuse(args, type(exc).__name__, str(exc))
    if args.json:
        emit_json(
            {
                "ok": True,
                "n_sessions": got.n_sessions,
                "output": str(args.output) if args.output else None,
                "tasks": [t.to_dict() for t in got.tasks],
                "diagnostics": got.diagnostics,
            }
        )
        return EXIT_OK
    miner = got.diagnostics.get("mine", {}).get("miner", "?")
    say(f"{got.n_sessions} session(s) -> {len(got.tasks)} task(s) (miner: {miner})")
    for t in got.tasks:
        say(f"  [{t.split.value}/{t.outcome.value}] {' '.join(t.intent.split())[:90]}")
    if args.output:
        say(f"draft written to {args.output}: review it, set \"reviewed\": true, then run "
            f"`skillopt-sleep once --tasks-file {args.output}`")  # fmt: skip
    return EXIT_OK


async def _llm_gather(cfg: SleepConfig, project: Path, since: datetime | None) -> Gathered:
    from skillopt.backends.open import open_completer
    from skillopt_sleep.gather import gather_async

    assert cfg.pool is not None  # uses_llm_miner checked it
    async with open_completer(cfg.pool) as pool:
        return await gather_async(cfg, project=project, since=since, pool=pool, use_llm=True)
