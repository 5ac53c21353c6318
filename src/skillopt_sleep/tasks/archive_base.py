"""The task archive's plumbing: lifetime, transactions, rows, JSON columns, meta keys."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from skillopt.errors import CorruptStateError, DataError
from skillopt_sleep.tasks.archive_db import sqlite_errors

__all__ = ["ArchiveBase", "instant", "iso"]


def iso(moment: datetime) -> str:
    """An aware UTC ISO 8601 string (naive means UTC)."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat()


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


class ArchiveBase:
    """One connection, used from one thread. Methods raise :class:`CorruptStateError`
    naming the file when its content cannot be trusted."""

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

    def _stored_instant(self, text: str) -> datetime:
        try:
            return instant(text)
        except ValueError as exc:
            raise CorruptStateError(str(self.path), f"bad time {text!r}") from exc

    @contextlib.contextmanager
    def _decoding(self, what: str) -> Iterator[None]:
        """Stored rows that no longer decode are corruption, named with ``what``."""
        try:
            yield
        except CorruptStateError:
            raise
        except (DataError, ValueError, TypeError, KeyError) as exc:
            raise CorruptStateError(str(self.path), f"{what}: {exc}") from exc

    def _set_meta(self, key: str, value: str | None) -> None:
        if value is None:
            self._conn.execute("DELETE FROM meta WHERE key = ?", (key,))
        else:
            self._conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value)
            )
