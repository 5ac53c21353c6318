"""The night's first stage: transcripts -> session digests -> mined tasks -> splits.

One night's gathering (:func:`gather_night`):

1. **Window.** The project's task archive says which session files are pending: a
   per-file harvest cursor (nothing is skipped for ever) within the lookback window.
2. **Harvest** (local disk, in a worker thread): the pending transcripts become session
   digests, the ones an agent's session-end hook reported finished read first.
3. **Mine** through the archive's cache (no session mined twice): the LLM miner when
   configured, else the heuristic one.
4. **Compose** tonight's set: new tasks first, then recalled archive tasks up to capacity;
   splits are the core's deterministic hash split, so a task keeps its split across nights.
5. **Commit** happens later (:func:`commit_gathered`), once the night has completed: this
   stage only reads the archive (and fills the mining cache), so a failed or aborted night
   consumes no session.

A reviewed tasks file replaces all of it (no harvest, no recall).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from skillopt.backends.base import Completer
from skillopt.errors import ConfigError
from skillopt.splits import assign_splits
from skillopt.types import Origin, Split, TaskRecord
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.harvest import (
    HarvestResult,
    SessionDigest,
    SessionFile,
    SourceKind,
    SourceSpec,
    harvest,
)
from skillopt_sleep.harvest.finished import priority_of, read_finished
from skillopt_sleep.harvest.locations import Homes
from skillopt_sleep.harvest.locations import resolve as resolve_sources
from skillopt_sleep.mining.tasks_file import load_tasks_file
from skillopt_sleep.tasks.archive import TaskArchive
from skillopt_sleep.tasks.explain import explain_empty, harvest_notes
from skillopt_sleep.tasks.recall import share_capacity
from skillopt_sleep.tasks.records import ArchivePolicy, HarvestWindow

if TYPE_CHECKING:  # the miners load only when a night mines (a tasks file needs none)
    from skillopt_sleep.mining.batch import MinedBatch

__all__ = [
    "Gathered",
    "ProjectPreview",
    "collect",
    "commit_gathered",
    "from_tasks_file",
    "gather_night",
    "preview_all_projects",
    "session_limit",
    "sources_for",
    "split",
    "uses_llm_miner",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Gathered:
    """What a night works on, and (from :func:`gather_night`) what it will commit.

    ``tasks`` is tonight's set: new tasks first, then ``n_recalled`` recalled ones
    (``origin=recall``). ``mined`` is every task mined tonight (more than ``tasks`` when
    over capacity: the archive keeps them all). ``sessions`` are the session files read,
    recorded as harvested by :func:`commit_gathered`. ``why_nothing`` says why a night
    has no task; ``notes`` say what the harvest left for later (backlog).
    """

    tasks: tuple[TaskRecord, ...]
    n_sessions: int
    source: str  # "transcripts" | "tasks_file"
    diagnostics: dict[str, Any] = field(default_factory=dict)
    mined: tuple[TaskRecord, ...] = ()
    n_recalled: int = 0
    sessions: tuple[SessionFile, ...] = ()
    digest_keys: dict[str, str] = field(default_factory=dict)
    seen_at: dict[str, datetime] = field(default_factory=dict)
    request_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    window: HarvestWindow | None = None
    backlog: int = 0
    outside_window: int = 0
    why_nothing: str = ""
    notes: tuple[str, ...] = ()

    @property
    def new_tasks(self) -> tuple[TaskRecord, ...]:
        return tuple(t for t in self.tasks if t.origin is not Origin.RECALL)

    @property
    def recalled(self) -> tuple[TaskRecord, ...]:
        return tuple(t for t in self.tasks if t.origin is Origin.RECALL)

    def pending(self, *, consumed: bool) -> int:
        """Sessions pending after tonight: those the harvest left unread, and those it
        read unless the night consumed them (a night that commits does; one that fails,
        stops or only previews leaves them for the next night)."""
        return self.backlog + (0 if consumed else self.n_sessions)

    def checkpoint(self) -> dict[str, Any]:
        """JSON data for the run journal: with ``tasks.jsonl``, enough to commit a
        resumed night exactly as the original would have (:meth:`restore`)."""
        window = self.window
        return {
            "n_sessions": self.n_sessions,
            "source": self.source,
            "diagnostics": self.diagnostics,
            "mined": [t.to_dict() for t in self.mined],
            "n_recalled": self.n_recalled,
            "sessions": [_file_to_dict(f) for f in self.sessions],
            "digest_keys": dict(self.digest_keys),
            "seen_at": {k: v.isoformat() for k, v in self.seen_at.items()},
            "request_keys": {k: list(v) for k, v in self.request_keys.items()},
            "window": None if window is None else {
                "start": window.start.isoformat() if window.start else None,
                "fixed": window.fixed,
                "lookback_hours": window.lookback_hours,
            },
            "backlog": self.backlog,
            "outside_window": self.outside_window,
            "why_nothing": self.why_nothing,
            "notes": list(self.notes),
        }  # fmt: skip

    @classmethod
    def restore(cls, tasks: list[TaskRecord], info: dict[str, Any]) -> Gathered:
        """The inverse of :meth:`checkpoint` (older journals lack the new keys)."""
        raw_window = info.get("window")
        window = None
        if isinstance(raw_window, dict):
            start = raw_window.get("start")
            window = HarvestWindow(
                start=datetime.fromisoformat(start) if start else None,
                fixed=bool(raw_window.get("fixed")),
                lookback_hours=float(raw_window.get("lookback_hours", 0)),
            )
        return cls(
            tasks=tuple(tasks),
            n_sessions=int(info.get("n_sessions", 0)),
            source=str(info.get("source", "transcripts")),
            diagnostics=dict(info.get("diagnostics", {})),
            mined=tuple(TaskRecord.from_dict(t) for t in info.get("mined", ())),
            n_recalled=int(info.get("n_recalled", 0)),
            sessions=tuple(_file_from_dict(f) for f in info.get("sessions", ())),
            digest_keys={str(k): str(v) for k, v in info.get("digest_keys", {}).items()},
            seen_at={str(k): datetime.fromisoformat(v) for k, v in info.get("seen_at", {}).items()},
            request_keys={
                str(k): tuple(str(key) for key in v)
                for k, v in info.get("request_keys", {}).items()
            },
            window=window,
            backlog=int(info.get("backlog", 0)),
            outside_window=int(info.get("outside_window", 0)),
            why_nothing=str(info.get("why_nothing", "")),
            notes=tuple(str(n) for n in info.get("notes", ())),
        )


def _file_to_dict(file: SessionFile) -> dict[str, Any]:
    return {
        "source": file.source.value,
        "path": file.path,
        "size": file.size,
        "mtime_ns": file.mtime_ns,
        "session_id": file.session_id,
    }


def _file_from_dict(data: dict[str, Any]) -> SessionFile:
    return SessionFile(
        source=SourceKind(data["source"]),
        path=str(data["path"]),
        size=int(data["size"]),
        mtime_ns=int(data["mtime_ns"]),
        session_id=str(data.get("session_id", "")),
    )


def sources_for(cfg: SleepConfig, project: Path | None = None) -> list[SourceSpec]:
    """Where to read transcripts from (``auto`` resolved against this machine; the project
    may have moved Pi's sessions)."""
    s = cfg.sources
    homes = Homes(
        claude_home=s.claude_home,
        codex_home=s.codex_home,
        copilot_cli_home=s.copilot_cli_home,
        cursor_home=s.cursor_home,
        pi_home=s.pi_home,
        pi_session_dirs=tuple(s.pi_session_dirs),
        vscode_user_dirs=tuple(s.vscode_user_dirs),
        opencode_db=s.opencode_db,
        project=project,
    )
    return resolve_sources(s.kinds, homes)


def split(cfg: SleepConfig, tasks: list[TaskRecord]) -> list[TaskRecord]:
    return list(
        assign_splits(
            tasks,
            val_fraction=0.0,  # cross-fitting: every learnable task is held out once a night
            test_fraction=cfg.night.test_fraction,
            seed=cfg.night.seed,
        )
    )


def from_tasks_file(cfg: SleepConfig, *, project: Path, tasks_file: Path) -> Gathered:
    loaded = load_tasks_file(tasks_file)
    tasks = [replace(t, project=t.project or str(project)) for t in loaded.tasks]
    tasks = tasks[: cfg.night.max_tasks]
    # Splits the user chose in the file are kept; an all-train file gets the hash split.
    chosen = any(t.split is not Split.TRAIN for t in tasks)
    # The file's n_sessions says where its tasks came from; tonight read no session (a
    # count here would be reported as read, mined and pending: issue 31).
    return Gathered(
        tasks=tuple(tasks if chosen else split(cfg, tasks)),
        n_sessions=0,
        source="tasks_file",
        diagnostics={
            "tasks_file": str(tasks_file),
            "warnings": list(loaded.warnings),
            "sessions_behind_tasks": int(loaded.metadata.get("n_sessions", 0)),
        },
    )


def session_limit(cfg: SleepConfig) -> int:
    """Sessions read per night (the rest wait for the next nights)."""
    return cfg.sources.max_sessions or cfg.night.max_tasks * 3


def collect(
    cfg: SleepConfig,
    *,
    project: Path | None,
    since: datetime | None,
    harvested: frozenset[SessionFile] | None = None,
) -> HarvestResult:
    """Harvest the project's sessions (``project=None``: every project's), the sessions
    agents reported finished (``skillopt-sleep session-end``) first."""
    return harvest(
        sources_for(cfg, project),
        since=since,
        project=project,
        limit=session_limit(cfg),
        harvested=harvested,
        first=priority_of(read_finished(cfg.state_path())),
    )


def uses_llm_miner(cfg: SleepConfig) -> bool:
    """Whether a night mines with the LLM miner (the mock backend cannot mine)."""
    pool = cfg.pool
    return cfg.night.llm_mine and not (pool is None or all(m.kind == "mock" for m in pool.members))


# --------------------------------------------------------------------------- compounding


async def gather_night(
    cfg: SleepConfig,
    *,
    project: Path,
    archive: TaskArchive,
    pool: Completer | None,
    use_llm: bool,
    now: datetime,
    tasks_file: Path | None = None,
    clock: Callable[[], datetime] | None = None,
    before_mining: Callable[[int], None] | None = None,
) -> Gathered:
    """Tonight's tasks: pending sessions mined (through the cache) plus recalled tasks;
    ``before_mining`` hears how many calls the LLM miner is about to make (planned, no call).

    A tasks file replaces all of it (no harvest, no recall: ``sessions`` stays empty, so
    committing the night leaves the harvest cursor alone). Reads the archive and fills
    its mining cache; records nothing else (see :func:`commit_gathered`).
    """
    if tasks_file is not None:
        return await anyio.to_thread.run_sync(
            functools.partial(from_tasks_file, cfg, project=project, tasks_file=tasks_file)
        )
    window = archive.harvest_window(
        lookback_hours=cfg.sources.lookback_hours, now=now, rolling=cfg.sources.rolling_window
    )
    harvested = archive.harvested_files()
    result = await anyio.to_thread.run_sync(
        functools.partial(collect, cfg, project=project, since=window.start, harvested=harvested)
    )
    digests = result.digests
    from skillopt_sleep.mining.batch import mine_heuristic, mine_llm_cached, planned_calls

    if use_llm and digests:
        if pool is None:
            raise ConfigError("the LLM miner needs a model pool", key="night.llm_mine")
        if before_mining is not None:
            before_mining(planned_calls(digests, archive=archive, project=str(project),
                                        call_tokens=cfg.night.mine_call_tokens))  # fmt: skip
        batch = await mine_llm_cached(
            pool,
            digests,
            archive=archive,
            project=str(project),
            clock=clock or (lambda: now),
            call_tokens=cfg.night.mine_call_tokens,
        )
    else:
        batch = mine_heuristic(digests, project=str(project))
    return _compose(cfg, archive=archive, now=now, result=result, batch=batch, window=window)


def _compose(
    cfg: SleepConfig,
    *,
    archive: TaskArchive,
    now: datetime,
    result: HarvestResult,
    batch: MinedBatch,
    window: HarvestWindow,
) -> Gathered:
    from skillopt_sleep.tasks.aliases import alias_mined

    night = cfg.night
    aliased = alias_mined(
        batch.tasks, seen_at=batch.seen_at, request_keys=batch.request_keys, archive=archive
    )
    mined = split(cfg, list(aliased.tasks))
    fresh = [t for t in mined if t.split is not Split.TEST]
    recallable = archive.recall(
        now=now,
        limit=night.max_tasks,
        exclude={t.id for t in mined} | aliased.duplicates,
        related_to=fresh,
        policy=ArchivePolicy.from_settings(night),
    )
    n_new, n_recalled = share_capacity(
        night.max_tasks,
        available_new=len(mined),
        available_recalled=len(recallable),
        recall_share=night.recall_share,
    )
    tasks = (*mined[:n_new], *recallable[:n_recalled])
    why = "" if tasks else explain_empty(result, window, sources=cfg.sources.kinds)
    recall = {"available": len(recallable), "taken": n_recalled, "new_taken": n_new}
    mine_info: dict[str, Any] = {"miner": batch.miner, **batch.diagnostics}
    if aliased.mapped:  # a heuristic task of a request an LLM task already owns
        mine_info["aliased"] = dict(aliased.mapped)
    notes = harvest_notes(
        result, limit=session_limit(cfg), n_mined=len(mined), n_taken=n_new,
        n_recalled=n_recalled,
    )  # fmt: skip
    return Gathered(
        tasks=tasks,
        n_sessions=len(result.digests),
        source="transcripts",
        diagnostics={"harvest": result.diagnostics.to_dict(), "mine": mine_info, "recall": recall},
        mined=tuple(mined),
        n_recalled=n_recalled,
        sessions=result.visited,
        digest_keys=batch.keys,
        seen_at=aliased.seen_at,
        request_keys=aliased.request_keys,
        window=window,
        backlog=result.backlog,
        outside_window=result.outside_window,
        why_nothing=why,
        notes=notes,
    )


def commit_gathered(archive: TaskArchive, gathered: Gathered, *, night: int, now: datetime) -> None:
    """Record tonight's mined tasks and mark its sessions harvested, in one transaction.

    Call it only when the night completed (not for a dry run, a failed or aborted night),
    before recording outcomes. Idempotent: a resumed night may commit again safely. A
    tasks-file night has nothing to commit here.
    """
    if gathered.source != "transcripts":
        return
    with archive.transaction():
        archive.record_mined(
            gathered.mined,
            night=night,
            now=now,
            seen_at=gathered.seen_at,
            request_keys=gathered.request_keys,
        )
        archive.mark_harvested(
            gathered.sessions,
            night=night,
            now=now,
            window=gathered.window,
            digest_keys=gathered.digest_keys,
            backlog=gathered.backlog,
            outside_window=gathered.outside_window,
        )


# --------------------------------------------------------------------------- every project


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectPreview:
    """What the sessions of one project would give (``harvest --scope all``)."""

    project: str  # "" when the session named no working directory
    n_sessions: int
    tasks: tuple[TaskRecord, ...]


def preview_all_projects(
    cfg: SleepConfig, *, now: datetime
) -> tuple[tuple[ProjectPreview, ...], HarvestResult]:
    """Every project's sessions of the last ``sources.lookback_hours`` (0 = all history),
    mined with the heuristic miner, grouped by project. Reads no archive and records
    nothing: a preview only."""
    from skillopt_sleep.mining.heuristic import heuristic_mine

    since = HarvestWindow.moving(cfg.sources.lookback_hours, now).start
    result = collect(cfg, project=None, since=since)
    groups: dict[str, list[SessionDigest]] = {}
    for digest in result.digests:
        groups.setdefault(str(digest.cwd) if digest.cwd else "", []).append(digest)
    previews = tuple(
        ProjectPreview(
            project=name,
            n_sessions=len(digests),
            tasks=heuristic_mine(digests, project=name, max_tasks=cfg.night.max_tasks).tasks,
        )
        for name, digests in sorted(groups.items(), key=lambda g: (-len(g[1]), g[0]))
    )
    return previews, result
