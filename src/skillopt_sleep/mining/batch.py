"""Mining through the archive's cache: a session digest is mined (and paid for) once.

Sessions the cache lacks are mined a request at a time, not a session at a time: the
sessions that opened with the same request are one entry of a prompt, and several entries
share a call up to a token bound (:mod:`.groups`, :mod:`.joint`). Each session's result is
written to the cache the moment its call lands, so a night killed half-way through mining
and run again pays only for the sessions it never got an answer for. The key is a hash of
the digest's content (not its path: Codex keeps the same session in two places), the miner
and the project, so a session that grew since is mined again. A session whose call failed
(endpoint down) is not cached: its heuristic fallback is used tonight and the LLM is asked
again next time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anyio

from skillopt.backends.base import Completer
from skillopt.errors import BudgetExceededError
from skillopt.logging import get_logger
from skillopt.types import TaskRecord
from skillopt_sleep.harvest import SessionDigest
from skillopt_sleep.mining.groups import RequestGroup, group_by_request, pack
from skillopt_sleep.mining.heuristic import heuristic_mine, merge_tasks, request_key
from skillopt_sleep.mining.joint import call_overhead, entry_cost, entry_text, mine_joint
from skillopt_sleep.mining.llm import MiningTally
from skillopt_sleep.tasks.archive import TaskArchive
from skillopt_sleep.tasks.records import MinedSession

__all__ = [
    "DEFAULT_CALL_TOKENS",
    "MINER_VERSION",
    "MinedBatch",
    "digest_key",
    "mine_heuristic",
    "mine_llm_cached",
    "planned_calls",
    "request_keys_of",
]

MINER_VERSION = "1"
#: A mining call's prompt plus the reply it may need, in tokens (``night.mine_call_tokens``).
DEFAULT_CALL_TOKENS = 8000
_MAX_LISTED = 50

_log = get_logger(__name__)


def digest_key(digest: SessionDigest, *, miner: str, project: str) -> str:
    """The mining cache key of one session digest."""
    data = digest.to_dict()
    data.pop("path", None)
    body = json.dumps([MINER_VERSION, miner, project, data], sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:40]


@dataclass(frozen=True, slots=True, kw_only=True)
class MinedBatch:
    """Tasks mined from a batch of sessions (all of them, merged: the archive keeps them
    all; the night picks up to ``max_tasks``). ``keys`` maps a session file path to its
    digest key; ``seen_at`` maps a task id to when its newest session ended;
    ``request_keys`` maps a task id to the request keys of the sessions whose main request
    it is (:func:`request_keys_of`)."""

    tasks: tuple[TaskRecord, ...]
    miner: str
    keys: dict[str, str] = field(default_factory=dict)
    seen_at: dict[str, datetime] = field(default_factory=dict)
    request_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)


def _seen_at(tasks: Sequence[TaskRecord], digests: Sequence[SessionDigest]) -> dict[str, datetime]:
    ended = {d.session_id: d.ended_at for d in digests}
    out: dict[str, datetime] = {}
    for task in tasks:
        times = [ended[s] for s in task.source_sessions if s in ended]
        if times:
            out[task.id] = max(times)
    return out


def request_keys_of(
    mined: Iterable[tuple[SessionDigest, Sequence[TaskRecord]]],
) -> dict[str, tuple[str, ...]]:
    """Task id -> the request keys (:func:`request_key`) of the sessions whose main request
    it is: a session's first mined task. Paraphrases the LLM miner merges give one task
    several keys; the archive uses them to keep one request one task across miners."""
    out: dict[str, dict[str, None]] = {}
    for digest, tasks in mined:
        key = request_key(digest)
        if tasks and key is not None:
            out.setdefault(tasks[0].id, {})[key] = None
    return {task_id: tuple(keys) for task_id, keys in out.items()}


def mine_heuristic(digests: Sequence[SessionDigest], *, project: str) -> MinedBatch:
    """The offline miner (free, deterministic: nothing to cache)."""
    mined = heuristic_mine(digests, project=project, max_tasks=len(digests) * 3 + 1)
    keys = {str(d.path): digest_key(d, miner="heuristic", project=project) for d in digests}
    return MinedBatch(
        tasks=mined.tasks,
        miner="heuristic",
        keys=keys,
        seen_at=_seen_at(mined.tasks, digests),
        request_keys=_heuristic_keys(mined.tasks, digests),
        diagnostics={"miner": "heuristic", **mined.diagnostics},
    )


def _heuristic_keys(
    tasks: Sequence[TaskRecord], digests: Sequence[SessionDigest]
) -> dict[str, tuple[str, ...]]:
    """The heuristic miner's tasks are one a request key (their id), from every session
    that opened with it."""
    kept = {t.id: t for t in tasks}
    return request_keys_of((d, [kept[k]]) for d in digests if (k := request_key(d)) in kept)


@dataclass(slots=True)
class _Spent:
    calls: int = 0
    requests: int = 0  # entries sent: sessions that opened with the same request are one
    reasked: int = 0
    tally: MiningTally = field(default_factory=MiningTally)


async def _mine_missing(
    pool: Completer,
    missing: Sequence[SessionDigest],
    keys: dict[str, str],
    results: dict[str, MinedSession],
    *,
    archive: TaskArchive,
    project: str,
    clock: Callable[[], datetime],
    call_timeout: float | None,
    call_tokens: int,
) -> _Spent:
    """Mine the sessions the cache lacks into ``results`` (by path): grouped by opening
    request, the groups packed into calls within ``call_tokens``, the calls concurrent.
    Each session's result is cached as its call lands, unless the call failed."""
    groups = group_by_request(missing)
    entries = {id(g): entry_cost(entry_text(g, "S00")) for g in groups}
    runs = pack(
        groups,
        cost=lambda g: entries[id(g)],
        fixed=call_overhead(project=project),
        bound=call_tokens,
    )
    spent = _Spent(requests=len(groups))

    async def mine(run: list[RequestGroup]) -> None:
        got = await mine_joint(
            pool, run, project=project, tally=spent.tally, call_timeout=call_timeout
        )
        spent.calls += got.calls
        spent.reasked += got.reasked
        for path, mined in got.sessions:
            entry = MinedSession(
                digest_key=keys[path],
                miner="llm" if not mined.fallback_cause else "heuristic",
                tasks=mined.tasks,
                calls=mined.calls,
                fallback_cause=mined.fallback_cause,
            )
            if not mined.call_failed:
                archive.cache_mining(entry, now=clock())
            results[path] = entry

    try:
        async with anyio.create_task_group() as group:
            for run in runs:
                group.start_soon(mine, run)
    except* BudgetExceededError as caught:
        raise caught.exceptions[0] from None
    return spent


def planned_calls(
    digests: Sequence[SessionDigest], *, archive: TaskArchive, project: str, call_tokens: int
) -> int:
    """The mining calls :func:`mine_llm_cached` will make for ``digests``, planned without a
    call: the sessions the cache lacks, grouped and packed as it packs them (a reply that
    must be asked again adds to it)."""
    missing = [
        d for d in digests if d.user_intents
        and archive.cached_mining(digest_key(d, miner="llm", project=project)) is None
    ]  # fmt: skip
    groups = group_by_request(missing)
    return len(pack(groups, cost=lambda g: entry_cost(entry_text(g, "S00")),
                    fixed=call_overhead(project=project), bound=call_tokens))  # fmt: skip


async def mine_llm_cached(
    pool: Completer,
    digests: Sequence[SessionDigest],
    *,
    archive: TaskArchive,
    project: str,
    clock: Callable[[], datetime],
    call_timeout: float | None = None,
    call_tokens: int = DEFAULT_CALL_TOKENS,
) -> MinedBatch:
    """Mine each session with the LLM unless the cache already holds it (sessions of one
    request together, several requests per call within ``call_tokens``)."""
    chosen = [d for d in digests if d.user_intents]
    keys = {str(d.path): digest_key(d, miner="llm", project=project) for d in chosen}
    results: dict[str, MinedSession] = {}
    missing: list[SessionDigest] = []
    for digest in chosen:
        hit = archive.cached_mining(keys[str(digest.path)])
        if hit is None:
            missing.append(digest)
        else:
            results[str(digest.path)] = hit
    spent = await _mine_missing(
        pool, missing, keys, results, archive=archive, project=project, clock=clock,
        call_timeout=call_timeout, call_tokens=call_tokens,
    )  # fmt: skip

    done = [(d, results[str(d.path)]) for d in chosen if str(d.path) in results]
    entries = [e for _, e in done]
    llm_tasks = [t for e in entries if not e.fallback_cause for t in e.tasks]
    fallbacks = [
        {"session_id": d.session_id, "cause": e.fallback_cause} for d, e in done if e.fallback_cause
    ]
    diagnostics: dict[str, Any] = {
        "miner": "llm",
        "sessions": len(chosen),
        "cached": len(chosen) - len(missing),
        "mined_now": len(missing),
        "requests": spent.requests,
        "calls": spent.calls,
        "reasked": spent.reasked,
        "dropped_uncheckable": spent.tally.dropped_uncheckable,
        "dropped_checks": spent.tally.dropped_checks,
        "dropped_short": spent.tally.dropped_short,
        "dropped_extra": spent.tally.dropped_extra,
        "fallbacks": fallbacks[:_MAX_LISTED],
    }
    if chosen and not llm_tasks:
        fallback = mine_heuristic(digests, project=project)
        _log.warning("mine.llm_empty", sessions=len(chosen), fallbacks=len(fallbacks))
        return MinedBatch(
            tasks=fallback.tasks,
            miner="heuristic",
            keys=keys,
            seen_at=fallback.seen_at,
            request_keys=fallback.request_keys,
            diagnostics={
                **diagnostics,
                "miner": "heuristic",
                "fallback_all": "the LLM miner produced no usable task",
                "heuristic": fallback.diagnostics,
            },
        )
    merged = merge_tasks(t for e in entries for t in e.tasks)
    diagnostics["tasks"] = len(merged)
    _log.info("mine.cached_done", **{k: v for k, v in diagnostics.items() if isinstance(v, int)})
    return MinedBatch(
        tasks=tuple(merged),
        miner="llm",
        keys=keys,
        seen_at=_seen_at(merged, chosen),
        request_keys=request_keys_of((d, e.tasks) for d, e in done),
        diagnostics=diagnostics,
    )
