"""Open another program's SQLite database read-only, without ever getting in its way.

Copilot CLI and OpenCode keep their sessions in SQLite, usually in WAL mode with a
``-wal`` and ``-shm`` file beside the database, and may be running while we read.

- The database is opened through a ``file:...?mode=ro`` URI with ``query_only``: nothing
  we do can write to it or its ``-wal`` (a WAL reader does take its read lock in the
  ``-shm``, SQLite's shared lock table, as every reader must). It is never opened
  ``immutable=1``: that would skip the ``-wal`` file (losing what the agent wrote last) and
  assume the file cannot change under us.
- Autocommit: a query holds a read lock only while it runs and each session is read in its
  own short read transaction, so a writer is never blocked for longer than one query (in
  WAL mode readers never block the writer at all). A writer's lock makes us wait at most
  ``busy_ms`` (then the read fails and is counted), never the other way round.
- A text cell that is not valid UTF-8 (an agent that wrote raw bytes) comes back decoded
  with replacement characters as a :class:`MisencodedText`, which the readers count
  (``invalid_utf8_lines``) like a bad line of a log, instead of failing the whole session.
- When the live database cannot be opened read-only (a WAL database in a directory we may
  not write, without its ``-shm``), the database and its ``-wal`` are copied into a private
  temporary directory and the copy is read.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillopt.logging import get_logger
from skillopt_sleep.harvest.refs import Unreadable

__all__ = [
    "BUSY_MS",
    "Listed",
    "MisencodedText",
    "columns",
    "list_rows",
    "misencoded",
    "open_readonly",
    "read_transaction",
]

BUSY_MS = 2000
_log = get_logger(__name__)


class MisencodedText(str):
    """A text cell that held invalid UTF-8, decoded with replacement characters."""

    __slots__ = ()


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return MisencodedText(raw.decode("utf-8", errors="replace"))


def misencoded(*cells: object) -> int:
    """How many of ``cells`` held invalid UTF-8 (for the reader's ``invalid_utf8`` count)."""
    return sum(isinstance(cell, MisencodedText) for cell in cells)


def _connect(uri: str, busy_ms: int) -> sqlite3.Connection:
    conn = sqlite3.connect(
        uri, uri=True, isolation_level=None, timeout=busy_ms / 1000, check_same_thread=False
    )
    conn.text_factory = _text
    try:
        conn.execute("PRAGMA query_only = ON")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the WAL too
    except sqlite3.Error:
        conn.close()
        raise
    return conn


def _snapshot(path: Path, into: Path) -> Path:
    """Copy the database and its ``-wal`` (not the ``-shm``: it is rebuilt from the WAL)."""
    copy = into / path.name
    shutil.copyfile(path, copy)
    wal = path.with_name(path.name + "-wal")
    if wal.exists():
        shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
    return copy


@contextmanager
def open_readonly(path: Path, *, busy_ms: int = BUSY_MS) -> Iterator[sqlite3.Connection]:
    """A read-only, autocommit connection to ``path`` (raises :class:`sqlite3.Error` or
    :class:`OSError` when neither the database nor a copy of it can be read)."""
    if not path.is_file():
        raise FileNotFoundError(f"no database at {path}")
    with ExitStack() as stack:
        try:
            conn = _connect(f"{path.resolve().as_uri()}?mode=ro", busy_ms)
        except sqlite3.OperationalError as exc:
            _log.info("sqlite.snapshot", db=str(path), cause=str(exc))
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="skillopt-")))
            copy = _snapshot(path, scratch)
            conn = _connect(copy.as_uri(), busy_ms)  # ours: WAL recovery may write the copy
        stack.callback(conn.close)
        yield conn


@contextmanager
def read_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One consistent snapshot for the queries inside (released as soon as they are done)."""
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        conn.execute("COMMIT")


def columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """The columns of ``table`` (empty when there is no such table)."""
    return {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}


@dataclass(frozen=True, slots=True)
class Listed:
    """An open database and the rows of its session list."""

    conn: sqlite3.Connection
    rows: list[tuple[Any, ...]]


def list_rows(
    db: Path,
    resources: ExitStack,
    *,
    required: Mapping[str, set[str]],
    query: str,
    what: str,
) -> Listed | Unreadable:
    """Open ``db`` (kept open in ``resources``), check it has the ``required`` columns of
    ``what`` (e.g. "an OpenCode database"), and run the listing ``query``."""
    try:
        conn = resources.enter_context(open_readonly(db))
        for table, needed in required.items():
            missing = needed - columns(conn, table)
            if missing:
                lacks = ", ".join(sorted(missing))
                return Unreadable(where=str(db), reason=f"not {what}: {table} lacks {lacks}")
        return Listed(conn=conn, rows=conn.execute(query).fetchall())
    except (sqlite3.Error, OSError) as exc:
        return Unreadable(where=str(db), reason=f"{type(exc).__name__}: {exc}")
