"""One request, one task, whichever miner read it: the archive's request keys.

The heuristic miner names a task after its session's opening wording (``h_…``, the
session's request key, :func:`~skillopt_sleep.mining.heuristic.request_key`); the LLM miner
gives paraphrases of one request one canonical intent (``llm_…``). Each keeps its ids; the
archive remembers which request keys a task's sessions opened with (one LLM task may own
many: several wordings of one request). A request key owned by tasks of both miners is one
request: the LLM miner's task is kept and the heuristic one retires as its duplicate (kept,
never replayed, so the request never gates twice). A heuristic night after an LLM night
maps its tasks to the archived LLM tasks before the night composes its set
(:func:`~skillopt_sleep.tasks.aliases.alias_mined`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import datetime

from skillopt_sleep.tasks.archive_base import ArchiveBase, iso

__all__ = ["DUPLICATE", "HEURISTIC_PREFIX", "LLM_PREFIX", "AliasesSide", "miner_of"]

DUPLICATE = "the same request as "  # how a duplicate's retirement reason starts
HEURISTIC_PREFIX = "h_"
LLM_PREFIX = "llm_"


def miner_of(task_id: str) -> str:
    """``llm``, ``heuristic`` or ``""`` (a task neither miner made)."""
    if task_id.startswith(LLM_PREFIX):
        return "llm"
    if task_id.startswith(HEURISTIC_PREFIX):
        return "heuristic"
    return ""


class AliasesSide(ArchiveBase):
    """Request keys per task, and the duplicates they reveal."""

    def request_key_owners(self, keys: Collection[str]) -> dict[str, frozenset[str]]:
        """Request key -> the archived tasks whose sessions opened with it (keys no task
        owns are left out)."""
        owners: dict[str, set[str]] = {}
        wanted = list(dict.fromkeys(keys))
        for start in range(0, len(wanted), 500):  # SQLite's bound on parameters
            part = wanted[start : start + 500]
            marks = ", ".join("?" * len(part))
            for row in self._rows(
                f"SELECT request_key, task_id FROM request_keys WHERE request_key IN ({marks})",
                part,
            ):
                owners.setdefault(str(row["request_key"]), set()).add(str(row["task_id"]))
        return {key: frozenset(ids) for key, ids in owners.items()}

    def request_keys_of(self, task_id: str) -> frozenset[str]:
        rows = self._rows("SELECT request_key FROM request_keys WHERE task_id = ?", (task_id,))
        return frozenset(str(r["request_key"]) for r in rows)

    def _remember_request_keys(
        self, request_keys: Mapping[str, Iterable[str]], *, now: datetime
    ) -> list[str]:
        """Inside a transaction: record each task's request keys (tasks not in the archive
        are skipped), then retire every active heuristic task that shares a key with an LLM
        task as its duplicate. Returns the ids retired."""
        touched: set[str] = set()
        for task_id, keys in request_keys.items():
            if not self._rows("SELECT 1 FROM tasks WHERE id = ?", (task_id,)):
                continue
            for key in keys:
                self._conn.execute(
                    "INSERT OR IGNORE INTO request_keys (request_key, task_id) VALUES (?, ?)",
                    (key, task_id),
                )
                touched.add(key)
        retired: list[str] = []
        for _key, owners in sorted(self.request_key_owners(touched).items()):
            canonical = sorted(o for o in owners if miner_of(o) == "llm")
            if not canonical:
                continue
            why = f"{DUPLICATE}{canonical[0]} (the LLM miner's task for it)"
            for task_id in sorted(o for o in owners if miner_of(o) == "heuristic"):
                done = self._conn.execute(
                    "UPDATE tasks SET retired_at = ?, retired_why = ?"
                    " WHERE id = ? AND retired_why NOT LIKE ?",
                    (iso(now), why, task_id, f"{DUPLICATE}%"),
                )
                if done.rowcount:
                    retired.append(task_id)
        return retired
