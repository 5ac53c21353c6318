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
- **carried_edits**: edits waiting for a night that can test them;
- **sample_answers**: every judged sample by the question it answered, and from them each
  task's noise (:mod:`skillopt_sleep.tasks.archive_answers`);
- **superseded**: tasks newer sessions contradict, with that evidence: kept, never
  recalled (:mod:`skillopt_sleep.tasks.archive_superseded`);
- **request_keys**: the request keys each task's sessions opened with, so one request
  stays one task whichever miner read it (:mod:`skillopt_sleep.tasks.archive_aliases`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skillopt.logging import get_logger
from skillopt.redact import redact_obj
from skillopt.types import Origin, Split, TaskRecord
from skillopt_sleep.tasks.archive_aliases import DUPLICATE, AliasesSide
from skillopt_sleep.tasks.archive_answers import AnswersSide
from skillopt_sleep.tasks.archive_base import instant, iso
from skillopt_sleep.tasks.archive_cursor import ALL_HISTORY, HarvestSide
from skillopt_sleep.tasks.archive_db import connect
from skillopt_sleep.tasks.archive_edits import EditsSide
from skillopt_sleep.tasks.archive_superseded import SupersededSide, supersession_lines
from skillopt_sleep.tasks.recall import PASSED, UNSEEN, recall_order, retire_reason
from skillopt_sleep.tasks.records import (
    ArchivedTask,
    ArchivePolicy,
    ArchiveStats,
    CarriedEditStatus,
)

__all__ = ["ARCHIVE_NAME", "LEGACY_STATE_NAME", "TaskArchive", "archive_path", "open_archive"]

ARCHIVE_NAME = "tasks.sqlite"
LEGACY_STATE_NAME = "state.json"

_log = get_logger(__name__)


class TaskArchive(HarvestSide, EditsSide, AnswersSide, SupersededSide, AliasesSide):
    """See the module docstring. Methods raise :class:`CorruptStateError` naming the file
    when its content cannot be trusted."""

    # -- tasks ------------------------------------------------------------------------
    def record_mined(
        self,
        tasks: Iterable[TaskRecord],
        *,
        night: int,
        now: datetime,
        seen_at: Mapping[str, datetime] | None = None,
        request_keys: Mapping[str, Collection[str]] | None = None,
    ) -> int:
        """Add or refresh mined tasks (redacted); returns how many were new.

        ``seen_at`` maps a task id to when its newest source session ended (default
        ``now``). A task seen again gains its sessions and comes back from an
        ``unseen`` retirement; one retired for passing stays retired (tonight replays it
        anyway as a new task, and a failure brings it back, see :meth:`record_outcomes`).
        ``request_keys`` maps a task id to the request keys its sessions opened with: a
        heuristic task sharing one with an LLM task retires as its duplicate.
        """
        added = 0
        with self.transaction():
            for task in tasks:
                seen = seen_at.get(task.id, now) if seen_at else now
                added += self._upsert_task(task, night=night, seen=seen)
            duplicates = self._remember_request_keys(request_keys or {}, now=now)
        if duplicates:
            _log.info("archive.duplicates_retired", count=len(duplicates))
        return added

    def _upsert_task(self, task: TaskRecord, *, night: int, seen: datetime) -> int:
        record = redact_obj(replace(task, origin=_stored_origin(task)).to_dict())
        rows = self._rows("SELECT * FROM tasks WHERE id = ?", (task.id,))
        if not rows:
            sessions = list(dict.fromkeys(task.source_sessions))
            self._conn.execute(
                "INSERT INTO tasks (id, record, first_seen, last_seen, first_night, last_night,"
                " recurrences, sessions) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (task.id, json.dumps(record), iso(seen), iso(seen), night, night,
                 max(1, len(sessions)), json.dumps(redact_obj(sessions))),
            )  # fmt: skip
            return 1
        row = rows[0]
        self._lift_superseded(task.id, seen)
        known = self._json(row["sessions"], f"task {task.id} sessions")
        sessions = list(dict.fromkeys([*known, *redact_obj(list(task.source_sessions))]))
        record["source_sessions"] = sessions
        last_seen = max(instant(row["last_seen"]), seen.astimezone(UTC))
        first_seen = min(instant(row["first_seen"]), seen.astimezone(UTC))
        self._conn.execute(
            "UPDATE tasks SET record = ?, first_seen = ?, last_seen = ?,"
            " last_night = max(last_night, ?), first_night = min(first_night, ?),"
            " recurrences = ?, sessions = ?,"
            " retired_at = CASE WHEN retired_why LIKE ? THEN NULL ELSE retired_at END,"
            " retired_why = CASE WHEN retired_why LIKE ? THEN '' ELSE retired_why END"
            " WHERE id = ?",
            (json.dumps(record), iso(first_seen), iso(last_seen), night, night,
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
        with self._decoding(f"task {task_id}"):
            task = TaskRecord.from_dict(self._json(row["record"], f"task {task_id}"))
            return ArchivedTask(
                task=task,
                first_seen=instant(row["first_seen"]),
                last_seen=instant(row["last_seen"]),
                first_night=int(row["first_night"]),
                last_night=int(row["last_night"]),
                recurrences=int(row["recurrences"]),
                sessions=tuple(self._json(row["sessions"], f"task {task_id} sessions")),
                retired_at=instant(row["retired_at"]) if row["retired_at"] else None,
                retired_why=str(row["retired_why"]),
                last_passed=None if summary is None else summary[0],
                pass_streak=0 if summary is None else summary[1],
            )

    def _outcome_summaries(self, task_id: str | None = None) -> dict[str, tuple[bool, int]]:
        """Per task: whether its latest night passed, and how many latest nights in a row
        it passed under the current models and settings (the last :meth:`revive_solved`
        key; any, before one is known): a pass under other models is not one under these."""
        where, params = ("WHERE task_id = ?", (task_id,)) if task_id else ("", ())
        rows = self._rows(
            f"SELECT task_id, night, min(passed) AS passed, max(answer_key) AS answer_key"
            f" FROM outcomes {where} GROUP BY task_id, night ORDER BY task_id, night DESC",
            params,
        )
        current = self._meta("answer_key")
        out: dict[str, tuple[bool, int]] = {}
        broken: set[str] = set()
        for row in rows:
            tid, passed = str(row["task_id"]), bool(row["passed"])
            counts = passed and current in (None, str(row["answer_key"]))
            if tid not in out:
                out[tid] = (passed, int(counts))
                if not counts:
                    broken.add(tid)
            elif tid not in broken:
                if counts:
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

        Never retired or superseded ones, never those ``policy`` would retire now, never
        test-split tasks (the test split stays for reporting), never ids in ``exclude``
        (tonight's new tasks).
        """
        if limit <= 0:
            return []
        skip = set(exclude) | self.superseded_ids()
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
        answer_key: str = "",
    ) -> int:
        """Record tonight's per-task outcomes under the documents ``docs_hash`` (the ones a
        user would run: the adopted/accepted documents) and the models and settings
        ``answer_key``. Ids not in the archive are skipped; a retired task that fails comes
        back. Returns how many rows were written."""
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
                    " samples, passed, recorded_at, answer_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (task_id, night, run_id, docs_hash, float(score), int(n), int(ok), iso(now),
                     answer_key),
                )  # fmt: skip
                if not ok:  # a duplicate stays retired: its request gates as the other task
                    self._conn.execute(
                        "UPDATE tasks SET retired_at = NULL, retired_why = ''"
                        " WHERE id = ? AND retired_why NOT LIKE ?",
                        (task_id, f"{DUPLICATE}%"),
                    )
                written += 1
        return written

    def revive_solved(self, answer_key: str) -> list[str]:
        """When the models or settings differ from the last recorded ones (``answer_key``),
        tasks retired for passing come back: they passed under other models. The key is
        kept either way; returns the revived ids (none on the first call)."""
        with self.transaction():
            last = self._meta("answer_key")
            revived: list[str] = []
            if last is not None and last != answer_key:
                rows = self._rows(
                    "SELECT id FROM tasks WHERE retired_at IS NOT NULL AND retired_why LIKE ?",
                    (f"{PASSED}%",),
                )
                revived = [str(r["id"]) for r in rows]
                self._conn.execute(
                    "UPDATE tasks SET retired_at = NULL, retired_why = ''"
                    " WHERE retired_at IS NOT NULL AND retired_why LIKE ?",
                    (f"{PASSED}%",),
                )
            self._set_meta("answer_key", answer_key)
        if revived:
            _log.info("archive.revived", count=len(revived))
        return revived

    def outcome_history(self, task_id: str) -> list[dict[str, Any]]:
        """A task's outcomes, oldest night first (for reports)."""
        rows = self._rows(
            "SELECT night, run_id, docs_hash, answer_key, score, samples, passed FROM outcomes"
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
                        (iso(now), why, item.id),
                    )
                    retired.append((item.id, why))
        if retired:
            _log.info("archive.retired", count=len(retired))
        return retired

    # -- summary ----------------------------------------------------------------------
    def stats(self) -> ArchiveStats:
        """Sizes for ``status`` and the report: cheap counts, no session scan."""

        def count(sql: str) -> int:
            rows = self._rows(sql)
            return int(rows[0][0]) if rows else 0

        superseded = self.superseded()
        gone = {m.task_id for m in superseded}
        active = [t for t in self.tasks(include_retired=False) if t.id not in gone]
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
                "SELECT count(*) FROM carried_edits"
                f" WHERE status = '{CarriedEditStatus.PENDING.value}'"
            ),
            backlog=int(self._meta("backlog") or 0),
            outside_window=int(self._meta("outside_window") or 0),
            last_harvest_night=int(self._meta("last_harvest_night") or 0),
            window_start=(
                self._stored_instant(window) if window and window != ALL_HISTORY else None
            ),
            window_fixed=window is not None,
            migrated=self._meta("migrated") or "",
            superseded=len(superseded),
            supersessions=tuple(supersession_lines(superseded)),
            counted_by=self._meta("counted_by") or "",
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
            self._set_meta("legacy_checked", iso(now))
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
                self._set_meta("window_start", iso(state.harvest_cursor))
                parts.append(
                    f"the harvest cursor {iso(state.harvest_cursor)} (now the harvest window's"
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
