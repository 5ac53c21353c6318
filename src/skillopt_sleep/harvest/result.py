"""What one harvest returns: the digests, the files it read and what it counted on the way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skillopt_sleep.harvest.digest import SessionDigest
from skillopt_sleep.harvest.files import SessionFile

__all__ = ["HarvestDiagnostics", "HarvestResult"]


@dataclass(frozen=True, slots=True, kw_only=True)
class HarvestDiagnostics:
    files_seen: int = 0
    files_read: int = 0
    files_older_than_cursor: int = 0
    files_failed: int = 0
    files_harvested_before: int = 0
    files_outside_window: int = 0
    backlog: int = 0
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
            "files_harvested_before": self.files_harvested_before,
            "files_outside_window": self.files_outside_window,
            "backlog": self.backlog,
            "lines": self.lines,
            "malformed_lines": self.malformed_lines,
            "overlong_lines": self.overlong_lines,
            "invalid_utf8_lines": self.invalid_utf8_lines,
            "dropped": dict(sorted(self.dropped.items())),
            "problems": list(self.problems),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class HarvestResult:
    """``visited``: the files read this time (per-file cursor only), to be recorded as
    harvested when the night commits. ``backlog``: pending files left for later nights;
    ``outside_window``: pending files older than the window start, neither read nor consumed.
    """

    digests: tuple[SessionDigest, ...]  # newest first
    diagnostics: HarvestDiagnostics
    visited: tuple[SessionFile, ...] = ()
    backlog: int = 0
    outside_window: int = 0
