"""The archive's superseded tasks: older tasks that newer sessions contradict.

A superseded task stays in the archive (its record, dates and outcomes untouched) with the
evidence that superseded it; it is never recalled, so it never gates an edit again. The
same request mined again from a session newer than that evidence lifts the mark (the user
asked for it again: it is current evidence once more).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime

from skillopt.redact import redact_obj, redact_text
from skillopt_sleep.tasks.archive_base import ArchiveBase, instant, iso
from skillopt_sleep.tasks.records import Supersession

__all__ = ["SupersededSide", "supersession_lines"]

_ABOUT_CHARS = 70


class SupersededSide(ArchiveBase):
    """Mark, list and lift supersessions (one transaction each)."""

    def mark_superseded(self, marks: Iterable[Supersession]) -> list[str]:
        """Record ``marks`` (a task already superseded keeps its first mark); returns the
        ids newly superseded. Ids not in the archive are skipped."""
        added: list[str] = []
        with self.transaction():
            for mark in marks:
                known = self._rows("SELECT 1 FROM tasks WHERE id = ?", (mark.task_id,))
                done = self._rows("SELECT 1 FROM superseded WHERE task_id = ?", (mark.task_id,))
                if not known or done:
                    continue
                self._conn.execute(
                    "INSERT INTO superseded (task_id, night, marked_at, since, by_tasks, about,"
                    " why) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (mark.task_id, mark.night, iso(mark.marked_at), iso(mark.since),
                     json.dumps(redact_obj(list(mark.by_tasks))), redact_text(mark.about),
                     redact_text(mark.why)),
                )  # fmt: skip
                added.append(mark.task_id)
        return added

    def superseded(self) -> list[Supersession]:
        """Every superseded task, oldest mark first."""
        rows = self._rows("SELECT * FROM superseded ORDER BY marked_at, task_id")
        out = []
        for row in rows:
            task_id = str(row["task_id"])
            with self._decoding(f"superseded task {task_id}"):
                out.append(
                    Supersession(
                        task_id=task_id,
                        night=int(row["night"]),
                        marked_at=instant(row["marked_at"]),
                        since=instant(row["since"]),
                        by_tasks=tuple(self._json(row["by_tasks"], f"superseded {task_id}")),
                        about=str(row["about"]),
                        why=str(row["why"]),
                    )
                )
        return out

    def superseded_ids(self) -> frozenset[str]:
        return frozenset(str(r["task_id"]) for r in self._rows("SELECT task_id FROM superseded"))

    def _lift_superseded(self, task_id: str, seen: datetime) -> None:
        """Inside a transaction: a task seen in a session newer than the evidence that
        superseded it is current again."""
        self._conn.execute(
            "DELETE FROM superseded WHERE task_id = ? AND since < ?", (task_id, iso(seen))
        )


def supersession_lines(marks: Iterable[Supersession]) -> list[str]:
    """One line a group (same line, same newer evidence), as ``status`` and the report say:
    ``your sessions since 21 Nov contradict 3 archived task(s) about "...": superseded``."""
    groups: dict[tuple[str, str], list[Supersession]] = {}
    for mark in marks:
        groups.setdefault((mark.about, mark.since.date().isoformat()), []).append(mark)
    lines = []
    for (about, _), group in groups.items():
        since = min(m.since for m in group)
        shown = about if len(about) <= _ABOUT_CHARS else about[: _ABOUT_CHARS - 1] + "…"
        newer = len({t for m in group for t in m.by_tasks})
        lines.append(
            f"your sessions since {since.day} {since:%b} contradict {len(group)} archived "
            f'task(s) about "{shown}": superseded (kept, never replayed; {newer} newer '
            f"task(s) pass only without that line)"
        )
    return lines
