"""The task archive's SQLite file: connection settings, schema, versions, error mapping.

WAL journal with ``synchronous=FULL``: a killed process (or a crash mid-night) leaves the
last committed transaction intact and never a half-written one. A file that is not a
database (an empty one included: SQLite would start a new archive in it), fails SQLite's
integrity check or carries a schema this code does not know is a :class:`CorruptStateError`
naming the file; it is never reset silently.

An archive of an older schema is brought up to date when opened, in the same transaction
that checks it (:data:`_MIGRATIONS`: each step only adds, so nothing recorded is lost):

- 1 -> 2: ``sample_answers``, every judged sample by the question it answered;
- 2 -> 3: ``outcomes.answer_key``, the models and settings an outcome was measured with
  ('' on the rows recorded before);
- 3 -> 4: ``superseded``, the tasks newer sessions contradict (kept, never replayed);
- 4 -> 5: ``request_keys``, the request keys a task's sessions opened with (one request,
  one task, whichever miner read it); a heuristic task's key is its own id, so those of an
  older archive are filled in.

A new archive is the first schema with every step applied, so both paths give one shape.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from skillopt.errors import CorruptStateError, LockHeldError, StorageError

__all__ = ["BUSY_TIMEOUT_MS", "SCHEMA_VERSION", "connect", "sqlite_errors"]

SCHEMA_VERSION = 5
BUSY_TIMEOUT_MS = 10_000
_SQLITE_HEADER = b"SQLite format 3\x00"
_STORAGE_FAILURES = {  # SQLite's words -> ours (the user frees space or fixes permissions)
    "disk is full": "disk full",
    "readonly database": "read-only database",
    "disk I/O error": "disk I/O error (a full disk or a file-size limit?)",
}

_SAMPLE_ANSWERS = """
CREATE TABLE IF NOT EXISTS sample_answers (
    task_id     TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    task_hash   TEXT NOT NULL,     -- what the target and the judge see of the task
    docs_hash   TEXT NOT NULL,     -- skill.memory hashes, as the target sees them
    answer_key  TEXT NOT NULL,     -- models and settings that change answers or verdicts
    sample_id   INTEGER NOT NULL,
    run_id      TEXT NOT NULL,
    night       INTEGER NOT NULL,
    score       REAL NOT NULL,     -- the gate's score of this one sample
    recorded_at TEXT NOT NULL,
    PRIMARY KEY (task_id, task_hash, docs_hash, answer_key, sample_id, run_id)
);
"""

_SUPERSEDED = """
CREATE TABLE IF NOT EXISTS superseded (
    task_id    TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    night      INTEGER NOT NULL,  -- the night that found the contradiction
    marked_at  TEXT NOT NULL,
    since      TEXT NOT NULL,     -- when the newer evidence was first seen (ISO 8601 UTC)
    by_tasks   TEXT NOT NULL,     -- JSON list of the newer task ids
    about      TEXT NOT NULL,     -- the learned line the two pull apart
    why        TEXT NOT NULL
);
"""

_REQUEST_KEYS = """
CREATE TABLE IF NOT EXISTS request_keys (
    request_key TEXT NOT NULL,  -- mining.heuristic.request_key of a session
    task_id     TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    PRIMARY KEY (request_key, task_id)
);
CREATE INDEX IF NOT EXISTS request_keys_by_task ON request_keys (task_id);
INSERT OR IGNORE INTO request_keys (request_key, task_id)
    SELECT id, id FROM tasks WHERE substr(id, 1, 2) = 'h_';
"""

_SCHEMA_1 = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tasks (
    id          TEXT PRIMARY KEY,
    record      TEXT NOT NULL,     -- TaskRecord JSON, redacted
    first_seen  TEXT NOT NULL,     -- ISO 8601 UTC
    last_seen   TEXT NOT NULL,
    first_night INTEGER NOT NULL,
    last_night  INTEGER NOT NULL,
    recurrences INTEGER NOT NULL,  -- distinct source sessions
    sessions    TEXT NOT NULL,     -- JSON list of session ids
    retired_at  TEXT,              -- NULL while active
    retired_why TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS outcomes (
    task_id     TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    night       INTEGER NOT NULL,
    run_id      TEXT NOT NULL,
    docs_hash   TEXT NOT NULL,     -- the documents measured (hash or version label)
    score       REAL NOT NULL,
    samples     INTEGER NOT NULL,
    passed      INTEGER NOT NULL,
    recorded_at TEXT NOT NULL,
    PRIMARY KEY (task_id, night, run_id)
);
CREATE INDEX IF NOT EXISTS outcomes_by_task ON outcomes (task_id, night DESC);
CREATE TABLE IF NOT EXISTS harvested (
    source       TEXT NOT NULL,
    path         TEXT NOT NULL,
    size         INTEGER NOT NULL,
    mtime_ns     INTEGER NOT NULL,
    session_id   TEXT NOT NULL DEFAULT '',
    digest_key   TEXT NOT NULL DEFAULT '',
    harvested_at TEXT NOT NULL,
    night        INTEGER NOT NULL,
    PRIMARY KEY (source, path)
);
CREATE TABLE IF NOT EXISTS mining_cache (
    digest_key     TEXT PRIMARY KEY,
    miner          TEXT NOT NULL,
    tasks          TEXT NOT NULL,  -- JSON list of TaskRecord, redacted
    calls          INTEGER NOT NULL,
    fallback_cause TEXT NOT NULL DEFAULT '',
    created_at     TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS carried_edits (
    id             INTEGER PRIMARY KEY,
    edit_key       TEXT NOT NULL UNIQUE,
    edit           TEXT NOT NULL,  -- EditRecord JSON, redacted
    seen_tasks     TEXT NOT NULL,  -- JSON list of task ids its reflection saw
    first_night    INTEGER NOT NULL,
    last_night     INTEGER NOT NULL,
    nights_carried INTEGER NOT NULL,
    status         TEXT NOT NULL,
    why            TEXT NOT NULL DEFAULT '',
    updated_at     TEXT NOT NULL
);
"""
"""The first schema (version 1): :data:`_MIGRATIONS` bring it up to date."""


_MIGRATIONS: dict[int, str] = {
    2: _SAMPLE_ANSWERS,
    3: "ALTER TABLE outcomes ADD COLUMN answer_key TEXT NOT NULL DEFAULT ''",
    4: _SUPERSEDED,
    5: _REQUEST_KEYS,
}
"""Schema version -> the statements that bring the version before it up to it."""


@contextlib.contextmanager
def sqlite_errors(path: Path) -> Iterator[None]:
    """Map SQLite's exceptions to ours: busy -> :class:`LockHeldError`, else corrupt."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        text = str(exc)
        for said, what in _STORAGE_FAILURES.items():
            if said in text:
                raise StorageError(what, str(path)) from exc
        if "locked" in text or "busy" in text:
            raise LockHeldError(f"{path}: {_who_is_writing(path)}") from exc
        raise CorruptStateError(str(path), f"task archive unusable: {text}") from exc
    except sqlite3.DatabaseError as exc:
        raise CorruptStateError(
            str(path), f"not a usable task archive ({exc}); move it aside to start a new one"
        ) from exc


def _who_is_writing(path: Path) -> str:
    """What is known about a write lock SQLite would not give up: SQLite does not say who
    holds it, but a night of this project holds the project's lock (next to the archive)."""
    from skillopt_sleep.lock import LOCK_NAME, lock_is_held

    holder = lock_is_held(path.parent / LOCK_NAME)
    waited = f"for {BUSY_TIMEOUT_MS // 1000} s"
    if holder is not None and holder.pid != os.getpid():
        return (
            f"the task archive stayed busy {waited}: {holder.describe()} holds this "
            "project's lock and is writing it; try again when it has finished"
        )
    return (
        f"the task archive stayed busy {waited}: another connection held a write lock on "
        "it. SQLite does not say whose, and no other night of this project holds its lock: "
        "another program with the file open (an sqlite3 shell, a backup or sync tool), or a "
        "`skillopt-sleep harvest` (it writes the archive, its mining cache and window, without "
        "a night's lock); try again when it has finished"
    )


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating if absent) and check the archive."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CorruptStateError(str(path), f"cannot create its directory: {exc}") from exc
    _remove_stale_builds(path)
    if not path.exists():
        _create(path)
    _refuse_foreign_file(path)
    return _open(path)


def _open(path: Path) -> sqlite3.Connection:
    with sqlite_errors(path):
        try:
            conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.Error as exc:
            raise CorruptStateError(str(path), f"cannot open the task archive: {exc}") from exc
        try:
            _prepare(conn, path)
        except BaseException:
            conn.close()
            raise
    return conn


def _create(path: Path) -> None:
    """A new archive, built aside and linked into place: SQLite creates an empty file first,
    which a kill would leave behind for the next run to refuse (a kill leaves the aside
    file instead: the next open removes it, :func:`_remove_stale_builds`). The link never
    replaces an archive another process created meanwhile (``status`` beside a first night)."""
    aside = path.with_name(f"{path.name}.new-{os.getpid()}")
    companions = [aside.with_name(aside.name + suffix) for suffix in ("", "-wal", "-shm")]
    for leftover in companions:
        leftover.unlink(missing_ok=True)
    try:
        _open(aside).close()  # closing checkpoints the log into the file and removes it
        os.link(aside, path)
    except FileExistsError:
        pass  # another process made it first: that one is the archive
    finally:
        for leftover in companions:
            leftover.unlink(missing_ok=True)


def _remove_stale_builds(path: Path) -> None:
    """Remove what a process killed while building a new archive left beside it
    (``<name>.new-<pid>`` and its journal files), once that process is dead."""
    from skillopt_sleep.lock import pid_alive

    built = re.compile(rf"{re.escape(path.name)}\.new-(\d+)(?:-wal|-shm|-journal)?")
    for leftover in path.parent.glob(f"{glob.escape(path.name)}.new-*"):
        match = built.fullmatch(leftover.name)
        if match is None or int(match[1]) == os.getpid() or pid_alive(int(match[1])):
            continue
        with contextlib.suppress(OSError):  # a file we cannot remove is only litter
            leftover.unlink(missing_ok=True)


def _refuse_foreign_file(path: Path) -> None:
    """A file already there must start as an SQLite database does. SQLite itself would take an
    empty (truncated) file for a new database and write a fresh archive over it."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        return  # a new archive
    except OSError as exc:
        raise CorruptStateError(str(path), f"cannot read the task archive: {exc}") from exc
    if head != _SQLITE_HEADER:
        what = "an empty file" if not head else "not an SQLite database"
        raise CorruptStateError(
            str(path), f"not a usable task archive ({what}); move it aside to start a new one"
        )


def _prepare(conn: sqlite3.Connection, path: Path) -> None:
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    check = conn.execute("PRAGMA quick_check").fetchone()
    if check is None or check[0] != "ok":
        detail = check[0] if check else "no answer"
        raise CorruptStateError(
            str(path), f"task archive failed its integrity check ({detail}); move it aside"
        )
    _schema_version(conn, path)  # a foreign database is refused before WAL mode changes it
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
    if mode is None or str(mode[0]).lower() != "wal":
        raise CorruptStateError(str(path), f"cannot use a write-ahead log here (mode {mode})")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _schema_version(conn, path)
        if version > SCHEMA_VERSION:
            raise CorruptStateError(
                str(path),
                f"task archive schema {version} is newer than this skillopt understands "
                f"({SCHEMA_VERSION}); upgrade skillopt",
            )
        if version == 0:
            for statement in _statements(_SCHEMA_1):
                conn.execute(statement)
            version = 1
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _statements(_MIGRATIONS[step]):
                conn.execute(statement)
        if version < SCHEMA_VERSION:
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _statements(script: str) -> list[str]:
    """The schema's statements (``executescript`` would commit our open transaction)."""
    lines = [line.split("--", 1)[0] for line in script.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def _schema_version(conn: sqlite3.Connection, path: Path) -> int:
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone()
    if has_meta is None:
        others = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if others and others[0]:
            raise CorruptStateError(str(path), "an SQLite file that is not a task archive")
        return 0
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        return int(row[0]) if row else 0
    except ValueError as exc:
        raise CorruptStateError(str(path), f"bad schema_version {row[0]!r}") from exc
