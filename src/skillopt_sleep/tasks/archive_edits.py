"""The archive's carried edits: edits waiting for a night whose held-out tasks can test them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import datetime

from skillopt.errors import DataError
from skillopt.redact import redact_obj
from skillopt.types import EditRecord
from skillopt_sleep.tasks.archive_base import ArchiveBase, iso
from skillopt_sleep.tasks.records import CarriedEdit, CarriedEditStatus

__all__ = ["EditsSide", "edit_key"]


def edit_key(edit: EditRecord) -> str:
    """An edit's identity across nights: what it changes, not why it was proposed."""
    body = json.dumps([edit.target.value, edit.op, edit.content, edit.anchor])
    return hashlib.sha256(body.encode()).hexdigest()[:32]


class EditsSide(ArchiveBase):
    """Carry, list and settle edits (one transaction each)."""

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
                        (key, body, json.dumps(seen), night, night, CarriedEditStatus.PENDING.value,
                         why, iso(now)),
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
                     more, CarriedEditStatus.PENDING.value, why, iso(now), row["id"]),
                )  # fmt: skip
        if not keys:
            return []
        by_key = {e.id: e for e in self.carried_edits(status=None)}
        rows = self._rows(
            f"SELECT id FROM carried_edits WHERE edit_key IN ({','.join('?' * len(keys))})",
            keys,
        )
        return [by_key[int(r["id"])] for r in rows]

    def carried_edits(
        self, *, status: CarriedEditStatus | None = CarriedEditStatus.PENDING
    ) -> list[CarriedEdit]:
        """Carried edits in the order they were first carried (``status=None``: all)."""
        where, params = ("WHERE status = ?", (status.value,)) if status else ("", ())
        rows = self._rows(f"SELECT * FROM carried_edits {where} ORDER BY id", params)
        out = []
        for row in rows:
            with self._decoding(f"carried edit {row['id']}"):
                out.append(
                    CarriedEdit(
                        id=int(row["id"]),
                        edit=EditRecord.from_dict(self._json(row["edit"], "edit")),
                        seen_task_ids=frozenset(self._json(row["seen_tasks"], "seen tasks")),
                        first_night=int(row["first_night"]),
                        last_night=int(row["last_night"]),
                        nights_carried=int(row["nights_carried"]),
                        status=CarriedEditStatus(row["status"]),
                        why=str(row["why"]),
                    )
                )
        return out

    def resolve_edit(
        self, edit_id: int, *, status: CarriedEditStatus, night: int, now: datetime, why: str = ""
    ) -> None:
        """Settle a carried edit (accepted, rejected or dropped) with the reason."""
        with self.transaction():
            done = self._conn.execute(
                "UPDATE carried_edits SET status = ?, why = ?, last_night = max(last_night, ?),"
                " updated_at = ? WHERE id = ?",
                (status.value, why, night, iso(now), edit_id),
            ).rowcount
        if not done:
            raise DataError(f"{self.path}: no carried edit with id {edit_id}")
