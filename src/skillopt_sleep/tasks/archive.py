"""The per-project task archive: every mined task, its outcomes, the harvest cursor.

Lives at ``<state_dir>/projects/<key>/tasks.sqlite`` (stdlib ``sqlite3``, WAL). Each
public method that writes is one transaction; :meth:`TaskArchive.transaction` groups
several into one (a night's commit step). Every write is idempotent for the same night,
so a night that is re-run after a crash between two steps records nothing twice.

Open it with :func:`open_archive` (a context manager). Use it from one thread: the night
calls it from the event loop (each call is a short local transaction) and hands plain
data (:meth:`harvested_files`) to the harvest thread.

What it keeps:

- **tasks**: the redacted :class:`TaskRecord`, first/last seen (session times), nights,
  the sessions it was mined from, and whether it retired (kept, never replayed) and why;
- **outcomes**: per task, night and run: the documents measured, score, samples, passed;
- **harvested**: the per-file harvest cursor (see :mod:`skillopt_sleep.harvest.files`)
  and the harvest window's start once harvesting began;
- **mining_cache**: what mining a session digest produced, so no session is paid twice;
- **carried_edits**: edits waiting for a night that can test them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from skillopt.errors import CorruptStateError, DataError
from skillopt.logging import get_logger
from skillopt.redact import redact_obj
from skillopt.types import EditRecord, Origin, Split, TaskRecord
from skillopt_sleep.harvest.digest import SourceKind
from skillopt_sleep.harvest.files import SessionFile
from skillopt_sleep.tasks.archive_db import connect, sqlite_errors
from skillopt_sleep.tasks.recall import UNSEEN, recall_order, retire_reason
from skillopt_sleep.tasks.records import (
    ArchivedTask,
    ArchivePolicy,
    ArchiveStats,
    CarriedEdit,
    EditStatus,
    HarvestWindow,
    MinedSession,
)

ARCHIVE_NAME = "tasks.sqlite"
LEGACY_STATE_NAME = "state.json"
_ALL_HISTORY = "all"

_log = get_logger("skillopt_sleep.tasks.archive")


def _iso(moment: datetime) -> str:
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat()


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def edit_key(edit: EditRecord) -> str:
    """An edit's identity across nights: what it changes, not why it was proposed."""
    body = json.dumps([edit.target.value, edit.op, edit.content, edit.anchor])
    return hashlib.sha256(body.encode()).hexdigest()[:32]


class TaskArchive:
    """See the module docstring. Methods raise :class:`CorruptStateError` naming the file
    when its content cannot be trusted."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path
        self._depth = 0

    # -- lifetime ---------------------------------------------------------------------
    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction; nested uses join the outer one (all or nothing)."""
        with sqlite_errors(self.path):
            if self._depth == 0:
                self._conn.execute("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                if self._depth == 0:
                    self._conn.execute("ROLLBACK")
                raise
            self._depth -= 1
            if self._depth == 0:
                self._conn.execute("COMMIT")

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with sqlite_errors(self.path):
            cursor = self._conn.execute(sql, params)
            cursor.row_factory = sqlite3.Row
            return list(cursor.fetchall())

    def _json(self, text: str, what: str) -> Any:
        try:
            return json.loads(text)
        except ValueError as exc:
            raise CorruptStateError(str(self.path), f"{what}: not valid JSON ({exc})") from exc

    # -- meta -------------------------------------------------------------------------
    def _meta(self, key: str) -> str | None:
        rows = self._rows("SELECT value FROM meta WHERE key = ?", (key,))
        return str(rows[0]["value"]) if rows else None

    def _set_meta(self, key: str, value: str | None) -> None:
        if value is None:
            self._conn.execute("DELETE FROM meta WHERE key = ?", (key,))
        else:
            self._conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value)
            )

    # -- tasks ------------------------------------------------------------------------
    def record_mined(
        self,
        tasks: Iterable[TaskRecord],
        *,
        night: int,
        now: datetime,
        seen_at: Mapping[str, datetime] | None = None,
    ) -> int:
        """Add or refresh mined tasks (redacted); returns how many were new.

        ``seen_at`` maps a task id to when its newest source session ended (default
        ``now``). A task seen again gains its sessions and comes back from an
        ``unseen`` retirement; one retired for passing stays retired (tonight replays it
        anyway as a new task, and a failure brings it back, see :meth:`record_outcomes`).
        """
        added = 0
        with self.transaction():
            for task in tasks:
                seen = seen_at.get(task.id, now) if seen_at else now
                added += self._upsert_task(task, night=night, seen=seen)
        return added

    def _upsert_task(self, task: TaskRecord, *, night: int, seen: datetime) -> int:
        record = redact_obj(replace(task, origin=_stored_origin(task)).to_dict())
        rows = self._rows("SELECT * FROM tasks WHERE id = ?", (task.id,))
        if not rows:
            sessions = list(dict.fromkeys(task.source_sessions))
            self._conn.execute(
                "INSERT INTO tasks (id, record, first_seen, last_seen, first_night, last_night,"
                " recurrences, sessions) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (task.id, json.dumps(record), _iso(seen), _iso(seen), night, night,
                 max(1, len(sessions)), json.dumps(redact_obj(sessions))),
            )  # fmt: skip
            return 1
        row = rows[0]
        known = self._json(row["sessions"], f"task {task.id} sessions")
        sessions = list(dict.fromkeys([*known, *redact_obj(list(task.source_sessions))]))
        record["source_sessions"] = sessions
        last_seen = max(_instant(row["last_seen"]), seen.astimezone(UTC))
        first_seen = min(_instant(row["first_seen"]), seen.astimezone(UTC))
        self._conn.execute(
            "UPDATE tasks SET record = ?, first_seen = ?, last_seen = ?,"
            " last_night = max(last_night, ?), first_night = min(first_night, ?),"
            " recurrences = ?, sessions = ?,"
            " retired_at = CASE WHEN retired_why LIKE ? THEN NULL ELSE retired_at END,"
            " retired_why = CASE WHEN retired_why LIKE ? THEN '' ELSE retired_why END"
            " WHERE id = ?",
            (json.dumps(record), _iso(first_seen), _iso(last_seen), night, night,
             max(1, len(sessions)), json.dumps(sessions), f"{UNSEEN}%", f"{UNSEEN}%", task.id),
        )  # fmt: skip
        return 0

    def tasks(self, *, include_retired: bool = True) -> list[ArchivedTask]:
        """Every archived task with its outcome summary (oldest first)."""
        where = "" if include_retired else " WHERE retired_at IS NULL"
        rows = self._rows(f"SELECT * FROM tasks{where} ORDER BY first_seen, id")
        streaks = self._outcome_summaries()
        return [self._archived(row, streaks.get(str(row["id"]))) for row in rows]

    def task(self, task_id: str) -> ArchivedTask | None:
        rows = self._rows("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if not rows:
            return None
        return self._archived(rows[0], self._outcome_summaries(task_id).get(task_id))

    def _archived(self, row: sqlite3.Row, summary: tuple[bool, int] | None) -> ArchivedTask:
        task_id = str(row["id"])
        try:
            task = TaskRecord.from_dict(self._json(row["record"], f"task {task_id}"))
            return ArchivedTask(
                task=task,
                first_seen=_instant(row["first_seen"]),
                last_seen=_instant(row["last_seen"]),
                first_night=int(row["first_night"]),
                last_night=int(row["last_night"]),
                recurrences=int(row["recurrences"]),
                sessions=tuple(self._json(row["sessions"], f"task {task_id} sessions")),
                retired_at=_instant(row["retired_at"]) if row["retired_at"] else None,
                retired_why=str(row["retired_why"]),
                last_passed=None if summary is None else summary[0],
                pass_streak=0 if summary is None else summary[1],
            )
        except (DataError, ValueError, TypeError) as exc:
            if isinstance(exc, CorruptStateError):
                raise
            raise CorruptStateError(str(self.path), f"task {task_id}: {exc}") from exc

    def _outcome_summaries(self, task_id: str | None = None) -> dict[str, tuple[bool, int]]:
        """Per task: whether its latest night passed, and how many latest nights in a row."""
        where, params = ("WHERE task_id = ?", (task_id,)) if task_id else ("", ())
        rows = self._rows(
            f"SELECT task_id, night, min(passed) AS passed FROM outcomes {where}"
            " GROUP BY task_id, night ORDER BY task_id, night DESC",
            params,
        )
        out: dict[str, tuple[bool, int]] = {}
        broken: set[str] = set()
        for row in rows:
            tid, passed = str(row["task_id"]), bool(row["passed"])
            if tid not in out:
                out[tid] = (passed, int(passed))
                if not passed:
                    broken.add(tid)
            elif tid not in broken:
                if passed:
                    out[tid] = (out[tid][0], out[tid][1] + 1)
                else:
                    broken.add(tid)
        return out

    def recall(
        self,
        *,
        now: datetime,
        limit: int,
        exclude: Collection[str] = (),
        related_to: Sequence[TaskRecord] = (),
        policy: ArchivePolicy | None = None,
    ) -> list[TaskRecord]:
        """Up to ``limit`` active archived tasks to replay tonight, best first (see
        :mod:`skillopt_sleep.tasks.recall`), as ``origin=recall`` with their own ids.

        Never retired ones, never those ``policy`` would retire now, never test-split tasks
        (the test split stays for reporting), never ids in ``exclude`` (tonight's new tasks).
        """
        if limit <= 0:
            return []
        skip = set(exclude)
        candidates = [
            item
            for item in self.tasks(include_retired=False)
            if item.id not in skip
            and item.task.split is not Split.TEST
            and not (policy and retire_reason(item, now=now, policy=policy))
        ]
        chosen = recall_order(candidates, now=now, related_to=related_to)[:limit]
        return [replace(item.task, origin=Origin.RECALL) for item in chosen]

    def record_outcomes(
        self,
        *,
        night: int,
        run_id: str,
        docs_hash: str,
        scores: Mapping[str, float],
        passed: Mapping[str, bool],
        now: datetime,
        samples: Mapping[str, int] | int = 1,
    ) -> int:
        """Record tonight's per-task outcomes under the documents ``docs_hash`` (the ones a
        user would run: the adopted/accepted documents). Ids not in the archive are skipped;
        a retired task that fails comes back. Returns how many rows were written."""
        written = 0
        with self.transaction():
            known = {str(r["id"]) for r in self._rows("SELECT id FROM tasks")}
            for task_id, score in scores.items():
                if task_id not in known:
                    continue
                ok = bool(passed.get(task_id, False))
                n = samples if isinstance(samples, int) else samples.get(task_id, 1)
                self._conn.execute(
                    "INSERT OR REPLACE INTO outcomes (task_id, night, run_id, docs_hash, score,"
                    " samples, passed, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (task_id, night, run_id, docs_hash, float(score), int(n), int(ok), _iso(now)),
                )
                if not ok:
                    self._conn.execute(
                        "UPDATE tasks SET retired_at = NULL, retired_why = '' WHERE id = ?",
                        (task_id,),
                    )
                written += 1
        return written

    def outcome_history(self, task_id: str) -> list[dict[str, Any]]:
        """A task's outcomes, oldest night first (for reports)."""
        rows = self._rows(
            "SELECT night, run_id, docs_hash, score, samples, passed FROM outcomes"
            " WHERE task_id = ? ORDER BY night, run_id",
            (task_id,),
        )
        return [dict(row) | {"passed": bool(row["passed"])} for row in rows]

    def retire(self, *, now: datetime, policy: ArchivePolicy) -> list[tuple[str, str]]:
        """Retire active tasks that passed long enough or went unseen; returns (id, why)."""
        retired: list[tuple[str, str]] = []
        with self.transaction():
            for item in self.tasks(include_retired=False):
                why = retire_reason(item, now=now, policy=policy)
                if why:
                    self._conn.execute(
                        "UPDATE tasks SET retired_at = ?, retired_why = ? WHERE id = ?",
                        (_iso(now), why, item.id),
                    )
                    retired.append((item.id, why))
        if retired:
            _log.info("archive.retired", count=len(retired))
        return retired

    # -- harvest cursor ---------------------------------------------------------------
    def harvested_files(self) -> frozenset[SessionFile]:
        """Every session file version already harvested (plain data for the harvest)."""
        rows = self._rows("SELECT source, path, size, mtime_ns, session_id FROM harvested")
        try:
            return frozenset(
                SessionFile(
                    source=SourceKind(r["source"]),
                    path=str(r["path"]),
                    size=int(r["size"]),
                    mtime_ns=int(r["mtime_ns"]),
                    session_id=str(r["session_id"]),
                )
                for r in rows
            )
        except ValueError as exc:
            raise CorruptStateError(str(self.path), f"harvested sessions: {exc}") from exc

    def mark_harvested(
        self,
        files: Iterable[SessionFile],
        *,
        night: int,
        now: datetime,
        window: HarvestWindow | None = None,
        digest_keys: Mapping[str, str] | None = None,
        backlog: int = 0,
        outside_window: int = 0,
    ) -> int:
        """Record ``files`` as harvested (call it only when the night commits).

        ``window`` is the window the harvest used: once any file is recorded, its start
        becomes fixed. ``digest_keys`` maps a file path to its session's digest key;
        ``backlog`` / ``outside_window`` are kept for ``status``.
        """
        count = 0
        with self.transaction():
            for file in files:
                key = (digest_keys or {}).get(file.path, "")
                self._conn.execute(
                    "INSERT OR REPLACE INTO harvested (source, path, size, mtime_ns, session_id,"
                    " digest_key, harvested_at, night) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (file.source.value, file.path, file.size, file.mtime_ns, file.session_id,
                     key, _iso(now), night),
                )  # fmt: skip
                count += 1
            if count and window is not None and self._meta("window_start") is None:
                self._set_meta("window_start", _window_text(window.start))
            self._set_meta("backlog", str(backlog))
            self._set_meta("outside_window", str(outside_window))
            self._set_meta("last_harvest_night", str(night))
        return count

    def harvest_window(self, *, lookback_hours: float, now: datetime) -> HarvestWindow:
        """The window tonight's harvest uses: fixed once harvesting began (or set by
        ``harvest --since``), else the last ``lookback_hours`` (0 = all history)."""
        stored = self._meta("window_start")
        if stored is not None:
            start = None if stored == _ALL_HISTORY else self._stored_instant(stored)
            return HarvestWindow(start=start, fixed=True, lookback_hours=lookback_hours)
        start = None if lookback_hours <= 0 else now - timedelta(hours=lookback_hours)
        return HarvestWindow(start=start, fixed=False, lookback_hours=lookback_hours)

    def set_window_start(self, start: datetime | None) -> None:
        """Fix the harvest window's start (``None`` = all history): ``harvest --since``."""
        with self.transaction():
            self._set_meta("window_start", _window_text(start))

    def forget_harvested(self, *, since: datetime | None) -> int:
        """Make sessions pending again: those whose file changed after ``since``, or all
        (which also unfixes the window). Returns how many were forgotten."""
        with self.transaction():
            if since is None:
                gone = self._conn.execute("DELETE FROM harvested").rowcount
                self._set_meta("window_start", None)
            else:
                stamp = int(since.timestamp() * 1_000_000_000)
                gone = self._conn.execute(
                    "DELETE FROM harvested WHERE mtime_ns > ?", (stamp,)
                ).rowcount
        return int(gone)

    def _stored_instant(self, text: str) -> datetime:
        try:
            return _instant(text)
        except ValueError as exc:
            raise CorruptStateError(str(self.path), f"bad window start {text!r}") from exc

    # -- mining cache -----------------------------------------------------------------
    def cached_mining(self, digest_key: str) -> MinedSession | None:
        rows = self._rows("SELECT * FROM mining_cache WHERE digest_key = ?", (digest_key,))
        if not rows:
            return None
        row = rows[0]
        try:
            items = self._json(row["tasks"], f"mining cache {digest_key}")
            return MinedSession(
                digest_key=digest_key,
                miner=str(row["miner"]),
                tasks=tuple(TaskRecord.from_dict(t) for t in items),
                calls=int(row["calls"]),
                fallback_cause=str(row["fallback_cause"]),
            )
        except (DataError, TypeError) as exc:
            if isinstance(exc, CorruptStateError):
                raise
            raise CorruptStateError(str(self.path), f"mining cache {digest_key}: {exc}") from exc

    def cache_mining(self, entry: MinedSession, *, now: datetime) -> None:
        """Keep what mining one session produced (its own transaction, written as it lands)."""
        tasks = [redact_obj(t.to_dict()) for t in entry.tasks]
        with self.transaction():
            self._conn.execute(
                "INSERT OR REPLACE INTO mining_cache (digest_key, miner, tasks, calls,"
                " fallback_cause, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (entry.digest_key, entry.miner, json.dumps(tasks), entry.calls,
                 entry.fallback_cause, _iso(now)),
            )  # fmt: skip

    # -- carried edits ----------------------------------------------------------------
    def carry_edits(
        self,
        edits: Iterable[EditRecord],
        *,
        seen_task_ids: Iterable[str],
        night: int,
        now: datetime,
        why: str = "untested",
    ) -> list[CarriedEdit]:
        """Carry edits to later nights. The same edit carried again (same target, op,
        content, anchor) gains a night and the task ids its new reflection saw; a resolved
        one carried again is pending again."""
        seen = sorted(set(seen_task_ids))
        keys: list[str] = []
        with self.transaction():
            for edit in edits:
                key = edit_key(edit)
                keys.append(key)
                rows = self._rows("SELECT * FROM carried_edits WHERE edit_key = ?", (key,))
                body = json.dumps(redact_obj(edit.to_dict()))
                if not rows:
                    self._conn.execute(
                        "INSERT INTO carried_edits (edit_key, edit, seen_tasks, first_night,"
                        " last_night, nights_carried, status, why, updated_at)"
                        " VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?)",
                        (key, body, json.dumps(seen), night, night, EditStatus.PENDING.value,
                         why, _iso(now)),
                    )  # fmt: skip
                    continue
                row = rows[0]
                known = self._json(row["seen_tasks"], f"carried edit {row['id']}")
                more = int(night > int(row["last_night"]))
                self._conn.execute(
                    "UPDATE carried_edits SET edit = ?, seen_tasks = ?, last_night = ?,"
                    " nights_carried = nights_carried + ?, status = ?, why = ?, updated_at = ?"
                    " WHERE id = ?",
                    (body, json.dumps(sorted({*known, *seen})), max(night, int(row["last_night"])),
                     more, EditStatus.PENDING.value, why, _iso(now), row["id"]),
                )  # fmt: skip
        if not keys:
            return []
        by_key = {e.id: e for e in self.carried_edits(status=None)}
        rows = self._rows(
            f"SELECT id FROM carried_edits WHERE edit_key IN ({','.join('?' * len(keys))})",
            keys,
        )
        return [by_key[int(r["id"])] for r in rows]

    def carried_edits(self, *, status: EditStatus | None = EditStatus.PENDING) -> list[CarriedEdit]:
        """Carried edits in the order they were first carried (``status=None``: all)."""
        where, params = ("WHERE status = ?", (status.value,)) if status else ("", ())
        rows = self._rows(f"SELECT * FROM carried_edits {where} ORDER BY id", params)
        out = []
        for row in rows:
            try:
                out.append(
                    CarriedEdit(
                        id=int(row["id"]),
                        edit=EditRecord.from_dict(self._json(row["edit"], f"edit {row['id']}")),
                        seen_task_ids=frozenset(self._json(row["seen_tasks"], "seen tasks")),
                        first_night=int(row["first_night"]),
                        last_night=int(row["last_night"]),
                        nights_carried=int(row["nights_carried"]),
                        status=EditStatus(row["status"]),
                        why=str(row["why"]),
                    )
                )
            except (DataError, ValueError, TypeError) as exc:
                if isinstance(exc, CorruptStateError):
                    raise
                raise CorruptStateError(str(self.path), f"carried edit {row['id']}: {exc}") from exc
        return out

    def resolve_edit(
        self, edit_id: int, *, status: EditStatus, night: int, now: datetime, why: str = ""
    ) -> None:
        """Settle a carried edit (accepted, rejected or dropped) with the reason."""
        with self.transaction():
            done = self._conn.execute(
                "UPDATE carried_edits SET status = ?, why = ?, last_night = max(last_night, ?),"
                " updated_at = ? WHERE id = ?",
                (status.value, why, night, _iso(now), edit_id),
            ).rowcount
        if not done:
            raise DataError(f"{self.path}: no carried edit with id {edit_id}")

    # -- summary ----------------------------------------------------------------------
    def stats(self) -> ArchiveStats:
        """Sizes for ``status`` and the report: cheap counts, no session scan."""

        def count(sql: str) -> int:
            rows = self._rows(sql)
            return int(rows[0][0]) if rows else 0

        active = self.tasks(include_retired=False)
        window = self._meta("window_start")
        return ArchiveStats(
            tasks=count("SELECT count(*) FROM tasks"),
            active=len(active),
            retired=count("SELECT count(*) FROM tasks WHERE retired_at IS NOT NULL"),
            failing=sum(1 for t in active if t.failing),
            outcomes=count("SELECT count(*) FROM outcomes"),
            harvested_sessions=count("SELECT count(*) FROM harvested"),
            cached_sessions=count("SELECT count(*) FROM mining_cache"),
            pending_edits=count(
                f"SELECT count(*) FROM carried_edits WHERE status = '{EditStatus.PENDING.value}'"
            ),
            backlog=int(self._meta("backlog") or 0),
            outside_window=int(self._meta("outside_window") or 0),
            last_harvest_night=int(self._meta("last_harvest_night") or 0),
            window_start=(
                self._stored_instant(window) if window and window != _ALL_HISTORY else None
            ),
            window_fixed=window is not None,
            migrated=self._meta("migrated") or "",
        )

    # -- migration --------------------------------------------------------------------
    def migrate_state(self, state_path: Path, *, now: datetime) -> str:
        """Bring over ``state.json``'s ``task_archive`` and ``harvest_cursor`` once.

        The old cursor was a time: sessions whose file changed after it were read next,
        but some before it were never read (the ``max_sessions`` cut). Marking them
        harvested could lose them, so none is: the cursor becomes the harvest window's
        start instead, sessions before it stay pending (outside the window) and
        ``harvest --since DATE`` brings them in. Returns what was migrated ("" = nothing).
        """
        from skillopt_sleep.state import read_state_file

        with self.transaction():
            if self._meta("legacy_checked") is not None:
                return self._meta("migrated") or ""
            self._set_meta("legacy_checked", _iso(now))
            state = read_state_file(state_path)
            if state is None:
                return ""
            tasks = state.archived_tasks()
            for task in tasks:
                self._upsert_task(task, night=state.night, seen=now)
            parts = []
            if tasks:
                parts.append(f"{len(tasks)} task(s)")
            if state.harvest_cursor is not None and self._meta("window_start") is None:
                self._set_meta("window_start", _iso(state.harvest_cursor))
                parts.append(
                    f"the harvest cursor {_iso(state.harvest_cursor)} (now the harvest window's"
                    " start: older sessions stay pending; `skillopt-sleep harvest --since DATE`"
                    " brings them in)"
                )
            note = f"from {state_path.name}: " + " and ".join(parts) if parts else ""
            if note:
                self._set_meta("migrated", note)
        if note:
            _log.info("archive.migrated", path=str(self.path), note=note)
        return note


def _stored_origin(task: TaskRecord) -> Origin:
    """A recalled task is stored as what it was (recall is a role for one night)."""
    return Origin.MINED if task.origin is Origin.RECALL else task.origin


def _window_text(start: datetime | None) -> str:
    return _ALL_HISTORY if start is None else _iso(start)


def archive_path(project_dir: Path) -> Path:
    """``<state_dir>/projects/<key>/tasks.sqlite``."""
    return project_dir / ARCHIVE_NAME


def open_archive(
    path: Path, *, now: datetime | None = None, legacy_state: Path | None = None
) -> TaskArchive:
    """Open (creating and migrating if needed) the archive at ``path``.

    The first open brings over ``state.json`` beside it (``legacy_state`` overrides where
    it is looked for). Use as a context manager. Raises :class:`CorruptStateError` naming
    the file when it cannot be trusted.
    """
    conn = connect(path)
    archive = TaskArchive(conn, path)
    try:
        state_path = legacy_state or path.parent / LEGACY_STATE_NAME
        archive.migrate_state(state_path, now=now or datetime.now(UTC))
    except BaseException:
        archive.close()
        raise
    return archive
