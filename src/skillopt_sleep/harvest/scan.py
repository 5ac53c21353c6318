"""One harvest: which pending sessions to read, reading them newest first, keeping the project's.

1. List every source's sessions (:data:`~.sources.LISTERS`), nothing read yet: skip the
   files already harvested (the per-file cursor) and those last modified before the window
   (the time cursor), newest first; the sessions an agent reported finished
   (:mod:`.finished`) go ahead of all others.
2. Read them in that order until ``limit`` digests are found; a file that cannot be read is
   counted and skipped, never raised.
3. Keep a session that is the project's (its working directory at or below it), not ours
   (:data:`~.common.SELF_MARKER`) and not seen before; count every other outcome.
4. Return the digests newest first (the reported ones first), the files read (``visited``)
   and the counts (:class:`~.result.HarvestDiagnostics`).
"""

from __future__ import annotations

import os
import sqlite3
from collections import Counter
from collections.abc import Sequence, Set
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from skillopt.logging import get_logger
from skillopt.redact import sanitize
from skillopt_sleep.harvest.common import SELF_MARKER, DropReason, in_scope
from skillopt_sleep.harvest.common import resolve_dir as _resolve_dir
from skillopt_sleep.harvest.digest import SessionDigest, SourceKind
from skillopt_sleep.harvest.files import SessionFile, peek_cwd
from skillopt_sleep.harvest.lines import DEFAULT_MAX_LINE_BYTES, LineTally
from skillopt_sleep.harvest.locations import SourceSpec
from skillopt_sleep.harvest.refs import ReadOptions, SessionRef, Unreadable, may_be_in_scope
from skillopt_sleep.harvest.result import HarvestDiagnostics, HarvestResult
from skillopt_sleep.harvest.sources import LISTERS
from skillopt_sleep.harvest.timeparse import as_utc

__all__ = ["harvest"]

_MAX_PROBLEMS = 50
_READ_ERRORS = (OSError, ValueError, TypeError, AttributeError, KeyError, sqlite3.Error)
_log = get_logger(__name__)


def _older_and_ours(
    outcome: SessionDigest | DropReason, cursor: datetime | None, scope: Path | None
) -> bool:
    if not isinstance(outcome, SessionDigest) or cursor is None:
        return False
    return outcome.ended_at <= cursor and in_scope(outcome.cwd, scope)


def _maybe_ours(ref: SessionRef, scope: Path | None) -> bool:
    """Whether an unread pending session may belong to the project (for counts only)."""
    if scope is None:
        return True
    cwd = ref.cwd if ref.cwd is not None else peek_cwd(Path(ref.file.path))
    return may_be_in_scope(cwd, scope)


def _reported(path: str, first: Set[str]) -> bool:
    """Whether an agent reported the session at ``path`` finished (by path or session id)."""
    if not first:
        return False
    return os.path.realpath(path) in first or f"id:{Path(path).stem}" in first


@dataclass(slots=True)
class _Scan:
    """One harvest on its way: the window it applies and what it counted and met."""

    cursor: datetime | None
    scope: Path | None
    per_file: bool
    first: Set[str] = frozenset()
    counts: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    tally: LineTally = field(default_factory=LineTally)

    def problem(self, text: str) -> None:
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(sanitize(text)[:300])

    def candidates(
        self,
        sources: Sequence[SourceSpec],
        harvested: Set[SessionFile] | None,
        resources: ExitStack,
    ) -> list[tuple[datetime, SessionRef]]:
        """The pending sessions of every source, newest first (nothing read yet)."""
        found: list[tuple[datetime, SessionRef]] = []
        for spec in sources:
            for item in LISTERS[spec.kind](Path(spec.home).expanduser(), self.scope, resources):
                self.counts["seen"] += 1
                if isinstance(item, Unreadable):
                    self.counts["failed"] += 1
                    self.problem(f"{_shortened(item.where)}: {item.reason}")
                    continue
                file = item.file
                if harvested is not None and file in harvested:
                    self.counts["harvested"] += 1
                    continue
                if self.cursor is not None and file.mtime <= self.cursor:
                    if not self.per_file:
                        self.counts["old"] += 1
                    elif _maybe_ours(item, self.scope):
                        self.counts["outside"] += 1
                    continue
                found.append((file.mtime, item))
        found.sort(key=lambda c: (c[0], c[1].file.path), reverse=True)
        if self.first:  # stable: the reported sessions first, each group newest first
            found.sort(key=lambda c: not _reported(c[1].file.path, self.first))
        return found

    def read(
        self,
        candidates: list[tuple[datetime, SessionRef]],
        limit: int,
        options: ReadOptions,
    ) -> tuple[dict[tuple[SourceKind, str], SessionDigest], list[SessionFile]]:
        """Read ``candidates`` in order until ``limit`` digests are found: the digests by
        (source, session id) and the files read (whatever became of their session)."""
        digests: dict[tuple[SourceKind, str], SessionDigest] = {}
        visited: list[SessionFile] = []
        for index, (mtime, ref) in enumerate(candidates):
            if len(digests) >= limit:
                left = candidates[index:] if self.per_file else ()
                self.counts["backlog"] = sum(_maybe_ours(r, self.scope) for _, r in left)
                break
            file = ref.file
            try:
                builder = ref.read(options)
            except _READ_ERRORS as exc:
                self.counts["failed"] += 1
                self.problem(f"{file.path}: {type(exc).__name__}: {exc}")
                continue
            self.counts["read"] += 1
            outcome = builder.build(fallback_time=mtime)
            if _older_and_ours(outcome, self.cursor, self.scope):
                # Ours, but older than the window: left pending, not consumed.
                self.dropped[DropReason.BEFORE_CURSOR.value] += 1
                self.counts["outside"] += int(self.per_file)
                continue
            visited.append(file.with_session(sanitize(builder.session_id or Path(file.path).stem)))
            if isinstance(outcome, DropReason):
                self.dropped[outcome.value] += 1
            elif not in_scope(outcome.cwd, self.scope):
                self.dropped[DropReason.OUT_OF_SCOPE.value] += 1
            elif (file.source, outcome.session_id) in digests:
                self.dropped[DropReason.DUPLICATE.value] += 1
            else:
                digests[(file.source, outcome.session_id)] = outcome
        return digests, visited

    def diagnostics(self) -> HarvestDiagnostics:
        counts, tally = self.counts, self.tally
        return HarvestDiagnostics(
            files_seen=counts["seen"],
            files_read=counts["read"],
            files_older_than_cursor=counts["old"],
            files_failed=counts["failed"],
            files_harvested_before=counts["harvested"],
            files_outside_window=counts["outside"],
            backlog=counts["backlog"],
            lines=tally.lines,
            malformed_lines=tally.malformed,
            overlong_lines=tally.overlong,
            invalid_utf8_lines=tally.invalid_utf8,
            dropped=dict(self.dropped),
            problems=tuple(self.problems),
        )


def harvest(
    sources: Sequence[SourceSpec],
    *,
    since: datetime | None,
    project: Path | None,
    limit: int,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    extra_self_markers: Sequence[str] = (),
    harvested: Set[SessionFile] | None = None,
    first: Set[str] = frozenset(),
) -> HarvestResult:
    """Digests of pending sessions, newest first, at most ``limit``.

    ``since`` is an instant (naive = UTC; ``None`` = no cutoff): sessions that ended at or
    before it are left alone, and a file last modified at or before it is not opened.
    With ``harvested`` (the per-file cursor) ``since`` is the harvest window's start and
    every file not in ``harvested`` is pending: the result lists the files read
    (``visited``, whatever became of their session), the pending files left over once
    ``limit`` digests were found (``backlog``) and those older than the window
    (``outside_window``); both counts skip files whose head names another project.
    ``project`` limits the result to sessions whose working directory is the project or
    below it (``None`` = all projects). ``first`` (:func:`.finished.priority_of`) names the
    sessions agents reported finished: they are read, and returned, ahead of the others.
    Sessions opening with :data:`SELF_MARKER` (or an
    extra marker) are ours and dropped.
    """
    scan = _Scan(
        cursor=as_utc(since) if since is not None else None,
        scope=_resolve_dir(project) if project is not None else None,
        per_file=harvested is not None,
        first=first,
    )
    markers = (SELF_MARKER, *extra_self_markers)
    options = ReadOptions(tally=scan.tally, max_line_bytes=max_line_bytes, self_markers=markers)
    with ExitStack() as resources:  # database connections stay open while sessions are read
        candidates = scan.candidates(sources, harvested, resources)
        digests, visited = scan.read(candidates, limit, options)

    ordered = sorted(digests.values(), key=lambda d: d.ended_at, reverse=True)
    if first:
        ordered.sort(key=lambda d: not _reported(str(d.path), first))
    ordered = ordered[: max(0, limit)]
    diagnostics = scan.diagnostics()
    summary = {k: v for k, v in diagnostics.to_dict().items() if isinstance(v, int)}
    _log.info("harvest.done", sessions=len(ordered), **summary)
    return HarvestResult(
        digests=tuple(ordered),
        diagnostics=diagnostics,
        visited=tuple(visited) if scan.per_file else (),
        backlog=scan.counts["backlog"],
        outside_window=scan.counts["outside"],
    )


def _shortened(where: str, keep: int = 160) -> str:
    """A path cut in the middle to ``keep`` characters, so the reason after it survives the
    problem's length cap (a folder path can be longer than PATH_MAX)."""
    if len(where) <= keep:
        return where
    return f"{where[: keep // 2]}...{where[-keep // 2 :]}"
