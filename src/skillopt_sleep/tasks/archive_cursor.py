"""The archive's harvest side: the per-session cursor, the harvest window, the mining cache."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime

from skillopt.redact import redact_obj
from skillopt.types import TaskRecord
from skillopt_sleep.harvest.digest import SourceKind
from skillopt_sleep.harvest.files import SessionFile
from skillopt_sleep.tasks.archive_base import ArchiveBase, iso
from skillopt_sleep.tasks.records import HarvestWindow, MinedSession

__all__ = ["ALL_HISTORY", "HarvestSide", "window_text"]

ALL_HISTORY = "all"


def window_text(start: datetime | None) -> str:
    return ALL_HISTORY if start is None else iso(start)


class HarvestSide(ArchiveBase):
    """The per-file harvest cursor, the window's start, and the mining cache."""

    def harvested_files(self) -> frozenset[SessionFile]:
        """Every session file version already harvested (plain data for the harvest)."""
        rows = self._rows("SELECT source, path, size, mtime_ns, session_id FROM harvested")
        with self._decoding("harvested sessions"):
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
                     key, iso(now), night),
                )  # fmt: skip
                count += 1
            if count and window is not None and self._meta("window_start") is None:
                self._set_meta("window_start", window_text(window.start))
            self._set_meta("backlog", str(backlog))
            self._set_meta("outside_window", str(outside_window))
            self._set_meta("last_harvest_night", str(night))
            self._set_meta("counted_by", None)
        return count

    def recount_pending(self, *, backlog: int, outside_window: int, by: str) -> None:
        """Replace the last night's pending counts with those of a harvest preview ``by``
        ran after moving the window, so ``status`` does not show the old window's."""
        with self.transaction():
            self._set_meta("backlog", str(backlog))
            self._set_meta("outside_window", str(outside_window))
            self._set_meta("counted_by", by)

    def harvest_window(
        self, *, lookback_hours: float, now: datetime, rolling: bool = False
    ) -> HarvestWindow:
        """The window tonight's harvest uses: fixed once harvesting began (or set by
        ``harvest --since``), else the last ``lookback_hours`` (0 = all history).
        ``rolling``: always the last ``lookback_hours`` (``--lookback-hours``); a fixed
        start is kept for later nights, and sessions before the window stay pending."""
        stored = self._meta("window_start")
        if stored is not None and not rolling:
            start = None if stored == ALL_HISTORY else self._stored_instant(stored)
            return HarvestWindow(start=start, fixed=True, lookback_hours=lookback_hours)
        return HarvestWindow.moving(lookback_hours, now)

    def set_window_start(self, start: datetime | None) -> None:
        """Fix the harvest window's start (``None`` = all history): ``harvest --since``."""
        with self.transaction():
            self._set_meta("window_start", window_text(start))

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

    # -- mining cache -----------------------------------------------------------------
    def cached_mining(self, digest_key: str) -> MinedSession | None:
        rows = self._rows("SELECT * FROM mining_cache WHERE digest_key = ?", (digest_key,))
        if not rows:
            return None
        row = rows[0]
        with self._decoding(f"mining cache {digest_key}"):
            items = self._json(row["tasks"], "tasks")
            return MinedSession(
                digest_key=digest_key,
                miner=str(row["miner"]),
                tasks=tuple(TaskRecord.from_dict(t) for t in items),
                calls=int(row["calls"]),
                fallback_cause=str(row["fallback_cause"]),
            )

    def cache_mining(self, entry: MinedSession, *, now: datetime) -> None:
        """Keep what mining one session produced (its own transaction, written as it lands)."""
        tasks = [redact_obj(t.to_dict()) for t in entry.tasks]
        with self.transaction():
            self._conn.execute(
                "INSERT OR REPLACE INTO mining_cache (digest_key, miner, tasks, calls,"
                " fallback_cause, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (entry.digest_key, entry.miner, json.dumps(tasks), entry.calls,
                 entry.fallback_cause, iso(now)),
            )  # fmt: skip
