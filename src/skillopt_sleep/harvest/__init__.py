"""Harvest agent transcripts into :class:`SessionDigest` records.

:func:`harvest` is **synchronous** local-disk reading (no network, no writes). From async
code call it through ``anyio.to_thread.run_sync(functools.partial(harvest, ...))``.
It never raises for bad transcript content: malformed lines (of any shape or depth),
unreadable files and overlong lines are skipped and counted in :class:`HarvestDiagnostics`;
invalid UTF-8 is replaced and counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skillopt.logging import get_logger
from skillopt.redact import sanitize
from skillopt_sleep.harvest import claude_code, codex
from skillopt_sleep.harvest.common import SELF_MARKER, DropReason, SessionBuilder, in_scope
from skillopt_sleep.harvest.common import resolve_dir as _resolve_dir
from skillopt_sleep.harvest.digest import FeedbackSignal, Sentiment, SessionDigest, SourceKind
from skillopt_sleep.harvest.lines import DEFAULT_MAX_LINE_BYTES, LineTally
from skillopt_sleep.harvest.timeparse import as_utc, parse_instant

__all__ = [
    "SELF_MARKER",
    "DropReason",
    "FeedbackSignal",
    "HarvestDiagnostics",
    "HarvestResult",
    "Sentiment",
    "SessionDigest",
    "SourceKind",
    "SourceSpec",
    "harvest",
    "parse_instant",
]

_MAX_PROBLEMS = 50
_log = get_logger("skillopt_sleep.harvest")

_Reader = Callable[..., SessionBuilder]
_READERS: dict[SourceKind, tuple[Callable[[Path], Any], _Reader]] = {
    SourceKind.CLAUDE_CODE: (claude_code.session_files, claude_code.read_session),
    SourceKind.CODEX: (codex.session_files, codex.read_session),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceSpec:
    """One transcript source: ``home`` is e.g. ``~/.claude`` or ``~/.codex``."""

    kind: SourceKind
    home: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class HarvestDiagnostics:
    files_seen: int = 0
    files_read: int = 0
    files_older_than_cursor: int = 0
    files_failed: int = 0
    lines: int = 0
    malformed_lines: int = 0
    overlong_lines: int = 0
    invalid_utf8_lines: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "files_seen": self.files_seen,
            "files_read": self.files_read,
            "files_older_than_cursor": self.files_older_than_cursor,
            "files_failed": self.files_failed,
            "lines": self.lines,
            "malformed_lines": self.malformed_lines,
            "overlong_lines": self.overlong_lines,
            "invalid_utf8_lines": self.invalid_utf8_lines,
            "dropped": dict(sorted(self.dropped.items())),
            "problems": list(self.problems),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class HarvestResult:
    digests: tuple[SessionDigest, ...]  # newest first
    diagnostics: HarvestDiagnostics


def _mtime(path: Path) -> datetime | None:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, tz=UTC)
    except OSError:
        return None


def harvest(
    sources: Sequence[SourceSpec],
    *,
    since: datetime | None,
    project: Path | None,
    limit: int,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    extra_self_markers: Sequence[str] = (),
) -> HarvestResult:
    """Digests of sessions that ended strictly after ``since``, newest first, at most ``limit``.

    ``since`` is an instant (naive = UTC; ``None`` = no cutoff). ``project`` limits the
    result to sessions whose working directory is the project or below it (``None`` = all
    projects). Sessions opening with :data:`SELF_MARKER` (or an extra marker) are ours and
    dropped. Files are visited newest-modified first; a file last modified at or before
    ``since`` cannot hold newer lines and is not opened.
    """
    cursor = as_utc(since) if since is not None else None
    scope = _resolve_dir(project) if project is not None else None
    markers = (SELF_MARKER, *extra_self_markers)
    dropped: Counter[str] = Counter()
    problems: list[str] = []
    tally = LineTally()
    counts = Counter[str]()

    candidates: list[tuple[datetime, SourceKind, Path]] = []
    for spec in sources:
        list_files, _ = _READERS[spec.kind]
        for path in list_files(Path(spec.home).expanduser()):
            counts["seen"] += 1
            mtime = _mtime(path)
            if mtime is None:
                counts["failed"] += 1
                continue
            if cursor is not None and mtime <= cursor:
                counts["old"] += 1
                continue
            candidates.append((mtime, spec.kind, path))
    candidates.sort(key=lambda c: c[0], reverse=True)

    digests: dict[tuple[SourceKind, str], SessionDigest] = {}
    for mtime, kind, path in candidates:
        if len(digests) >= limit:
            break
        _, read = _READERS[kind]
        try:
            builder = read(path, tally, max_line_bytes=max_line_bytes, self_markers=markers)
        except (OSError, ValueError, TypeError, AttributeError, KeyError) as exc:
            counts["failed"] += 1
            if len(problems) < _MAX_PROBLEMS:
                problems.append(sanitize(f"{path}: {type(exc).__name__}: {exc}")[:300])
            continue
        counts["read"] += 1
        outcome = builder.build(fallback_time=mtime)
        if isinstance(outcome, DropReason):
            dropped[outcome.value] += 1
        elif not in_scope(outcome.cwd, scope):
            dropped[DropReason.OUT_OF_SCOPE.value] += 1
        elif cursor is not None and outcome.ended_at <= cursor:
            dropped[DropReason.BEFORE_CURSOR.value] += 1
        elif (kind, outcome.session_id) in digests:
            dropped[DropReason.DUPLICATE.value] += 1
        else:
            digests[(kind, outcome.session_id)] = outcome

    ordered = sorted(digests.values(), key=lambda d: d.ended_at, reverse=True)[: max(0, limit)]
    diagnostics = HarvestDiagnostics(
        files_seen=counts["seen"],
        files_read=counts["read"],
        files_older_than_cursor=counts["old"],
        files_failed=counts["failed"],
        lines=tally.lines,
        malformed_lines=tally.malformed,
        overlong_lines=tally.overlong,
        invalid_utf8_lines=tally.invalid_utf8,
        dropped=dict(dropped),
        problems=tuple(problems),
    )
    summary = {k: v for k, v in diagnostics.to_dict().items() if isinstance(v, int)}
    _log.info("harvest.done", sessions=len(ordered), **summary)
    return HarvestResult(digests=tuple(ordered), diagnostics=diagnostics)
