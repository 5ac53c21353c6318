"""What a transcript source lists: sessions it can read, each with its identity and version.

A source lists :class:`SessionRef` s (and :class:`Unreadable` for what it could not even
look at); :func:`skillopt_sleep.harvest.harvest` decides which to read. A session's
:class:`SessionFile` is its cursor identity: a transcript file, or for a database one row
(``<db>#<session id>``, its version the row's update time and message count).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from skillopt_sleep.harvest.common import SessionBuilder, in_scope, resolve_dir
from skillopt_sleep.harvest.digest import SourceKind
from skillopt_sleep.harvest.files import SessionFile
from skillopt_sleep.harvest.lines import LineTally

__all__ = [
    "Lister",
    "Listing",
    "PathReader",
    "ReadOptions",
    "Reader",
    "SessionRef",
    "Unreadable",
    "db_session",
    "db_session_path",
    "file_refs",
    "may_be_in_scope",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadOptions:
    """How to read one session: counters to fill, the line bound, our own markers."""

    tally: LineTally
    max_line_bytes: int
    self_markers: tuple[str, ...]


Reader = Callable[[ReadOptions], SessionBuilder]


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRef:
    """A session a source can read. ``cwd`` is its working directory when the source knows
    it without reading the session (a database row, VS Code's ``workspace.json``)."""

    file: SessionFile
    read: Reader
    cwd: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Unreadable:
    """Something a source could not list (a file it cannot stat, a database it cannot open)."""

    where: str
    reason: str


Listing = Iterator[SessionRef | Unreadable]
# (home, project scope or None for all, resources to close once the harvest is done)
Lister = Callable[[Path, Path | None, ExitStack], Listing]
PathReader = Callable[[Path, ReadOptions], SessionBuilder]


def file_refs(
    kind: SourceKind,
    paths: Iterable[Path | Unreadable],
    read: PathReader,
    *,
    cwd: str | None = None,
    cwd_of: Callable[[Path], str | None] | None = None,
) -> Listing:
    """One ref per transcript file: its stat is its version, ``read(path, options)`` reads it.
    Its working directory, when known without reading it: ``cwd`` (every file), or
    ``cwd_of(path)``. An :class:`Unreadable` among ``paths`` (a folder the walk could not
    list) is passed on."""
    for path in paths:
        if isinstance(path, Unreadable):
            yield path
            continue
        try:
            file = SessionFile.stat(kind, path)
        except OSError as exc:
            yield Unreadable(where=str(path), reason=f"cannot stat: {exc.strerror or exc}")
            continue
        known = cwd_of(path) if cwd_of is not None else cwd
        yield SessionRef(file=file, read=_bind(read, path), cwd=known)


def _bind(read: PathReader, path: Path) -> Reader:
    def reader(options: ReadOptions) -> SessionBuilder:
        return read(path, options)

    return reader


def db_session(
    kind: SourceKind, db: Path, session_id: str, *, size: int, mtime_ns: int
) -> SessionFile:
    """The cursor identity of one session kept in a database: ``<db>#<id>``, its version
    the row's message count and update time."""
    return SessionFile(
        source=kind, path=str(db_session_path(db, session_id)), size=size, mtime_ns=mtime_ns
    )


def db_session_path(db: Path, session_id: str) -> Path:
    """``<db>#<id>``: the path of a database session (its digest's and its cursor's)."""
    return db.with_name(f"{db.name}#{session_id}")


def may_be_in_scope(cwd: str | None, scope: Path | None) -> bool:
    """False only when ``cwd`` is known and names another project."""
    return scope is None or cwd is None or in_scope(resolve_dir(cwd), scope)
