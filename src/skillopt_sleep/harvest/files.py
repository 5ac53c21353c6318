"""The per-session harvest cursor's unit: one transcript file as it was when it was read.

A session is *harvested* when its exact ``(source, path, size, mtime_ns)`` is recorded in
the project's task archive, and *pending* otherwise. A file that grows (a session that went
on after it was read) no longer matches its record, so it is pending again and read anew.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from skillopt_sleep.harvest.digest import SourceKind

__all__ = ["PEEK_BYTES", "SessionFile", "peek_cwd"]

PEEK_BYTES = 8 * 1024  # the first lines; enough for both sources to name their cwd
_CWD = re.compile(rb'"cwd"\s*:\s*"((?:[^"\\]|\\.){1,4096})"')


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionFile:
    """A transcript file's identity and version. ``session_id`` is informative only: it is
    not part of equality, so a freshly stat'ed file matches its stored record."""

    source: SourceKind
    path: str
    size: int
    mtime_ns: int
    session_id: str = field(default="", compare=False)

    @classmethod
    def stat(cls, source: SourceKind, path: Path) -> SessionFile:
        """The file as it is now (raises :class:`OSError` when it cannot be stat'ed)."""
        info = os.stat(path)
        return cls(source=source, path=str(path), size=info.st_size, mtime_ns=info.st_mtime_ns)

    @property
    def mtime(self) -> datetime:
        return datetime.fromtimestamp(self.mtime_ns / 1e9, tz=UTC)

    def with_session(self, session_id: str) -> SessionFile:
        return SessionFile(
            source=self.source,
            path=self.path,
            size=self.size,
            mtime_ns=self.mtime_ns,
            session_id=session_id,
        )


def peek_cwd(path: Path) -> str | None:
    """The first working directory named in the head of a transcript, without parsing it.

    Used only to *count* pending sessions of a project (backlog, outside the window)
    without reading them; whether a session belongs to the project is decided when it is
    read. ``None`` when the head names none or the file cannot be read.
    """
    try:
        with open(path, "rb") as handle:
            head = handle.read(PEEK_BYTES)
    except OSError:
        return None
    match = _CWD.search(head)
    if match is None:
        return None
    try:
        value = json.loads(b'"' + match.group(1) + b'"')
    except ValueError:
        return None
    return value if isinstance(value, str) else None
