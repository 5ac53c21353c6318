"""The night's first stage: transcripts -> session digests -> mined tasks -> splits.

Synchronous local-disk work (the night runs it in a worker thread). A reviewed tasks file
replaces harvest and mining. Splits are the core's deterministic hash split, so a task
keeps its split across nights.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

from skillopt.backends.base import Completer
from skillopt.splits import assign_splits
from skillopt.types import Split, TaskRecord
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.harvest import HarvestResult, SourceKind, SourceSpec, harvest
from skillopt_sleep.llm_miner import llm_mine
from skillopt_sleep.mine import MineResult, heuristic_mine
from skillopt_sleep.tasks_file import load_tasks_file


@dataclass(frozen=True, slots=True, kw_only=True)
class Gathered:
    tasks: tuple[TaskRecord, ...]
    n_sessions: int
    source: str  # "transcripts" | "tasks_file"
    diagnostics: dict[str, Any] = field(default_factory=dict)


def harvest_window_start(
    cfg: SleepConfig, cursor: datetime | None, now: datetime
) -> datetime | None:
    """Where tonight's harvest starts: the cursor, else the first-night lookback."""
    if cursor is not None:
        return cursor
    hours = cfg.sources.lookback_hours
    return None if hours <= 0 else now - timedelta(hours=hours)


def sources_for(cfg: SleepConfig) -> list[SourceSpec]:
    homes = {"claude_code": cfg.sources.claude_home, "codex": cfg.sources.codex_home}
    return [SourceSpec(kind=SourceKind(k), home=homes[k].expanduser()) for k in cfg.sources.kinds]


def split(cfg: SleepConfig, tasks: list[TaskRecord]) -> list[TaskRecord]:
    return list(
        assign_splits(
            tasks,
            val_fraction=0.0,  # cross-fitting: every learnable task is held out once a night
            test_fraction=cfg.night.test_fraction,
            seed=cfg.night.seed,
        )
    )


def gather(
    cfg: SleepConfig,
    *,
    project: Path,
    since: datetime | None,
    tasks_file: Path | None = None,
) -> Gathered:
    """Harvest and mine with the heuristic miner (no model calls), or load a tasks file."""
    if tasks_file is not None:
        return from_tasks_file(cfg, project=project, tasks_file=tasks_file)
    harvested = collect(cfg, project=project, since=since)
    mined = heuristic_mine(harvested.digests, project=str(project), max_tasks=cfg.night.max_tasks)
    return finish(cfg, harvested, mined)


def from_tasks_file(cfg: SleepConfig, *, project: Path, tasks_file: Path) -> Gathered:
    loaded = load_tasks_file(tasks_file)
    tasks = [replace(t, project=t.project or str(project)) for t in loaded.tasks]
    tasks = tasks[: cfg.night.max_tasks]
    # Splits the user chose in the file are kept; an all-train file gets the hash split.
    chosen = any(t.split is not Split.TRAIN for t in tasks)
    return Gathered(
        tasks=tuple(tasks if chosen else split(cfg, tasks)),
        n_sessions=int(loaded.metadata.get("n_sessions", 0)),
        source="tasks_file",
        diagnostics={"tasks_file": str(tasks_file), "warnings": list(loaded.warnings)},
    )


def collect(cfg: SleepConfig, *, project: Path, since: datetime | None) -> HarvestResult:
    limit = cfg.sources.max_sessions or cfg.night.max_tasks * 3
    return harvest(sources_for(cfg), since=since, project=project, limit=limit)


def finish(cfg: SleepConfig, harvested: HarvestResult, mined: MineResult) -> Gathered:
    return Gathered(
        tasks=tuple(split(cfg, list(mined.tasks))),
        n_sessions=len(harvested.digests),
        source="transcripts",
        diagnostics={
            "harvest": harvested.diagnostics.to_dict(),
            "mine": {"miner": mined.miner, **mined.diagnostics},
        },
    )


def uses_llm_miner(cfg: SleepConfig) -> bool:
    """Whether a night mines with the LLM miner (the mock backend cannot mine)."""
    pool = cfg.pool
    return cfg.night.llm_mine and not (pool is None or all(m.kind == "mock" for m in pool.members))


async def gather_async(
    cfg: SleepConfig,
    *,
    project: Path,
    since: datetime | None,
    pool: Completer,
    use_llm: bool,
    tasks_file: Path | None = None,
) -> Gathered:
    """The night's version: disk work in a thread, then the LLM miner when enabled."""
    if tasks_file is not None or not use_llm:
        return await anyio.to_thread.run_sync(
            functools.partial(gather, cfg, project=project, since=since, tasks_file=tasks_file)
        )
    harvested = await anyio.to_thread.run_sync(
        functools.partial(collect, cfg, project=project, since=since)
    )
    mined = await llm_mine(
        pool, harvested.digests, project=str(project), max_tasks=cfg.night.max_tasks
    )
    return finish(cfg, harvested, mined)
