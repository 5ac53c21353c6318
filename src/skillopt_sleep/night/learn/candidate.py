"""One proposed edit with its provenance: what its reflection saw, where it may be tested.

Made by :func:`.crossfit.learn_step` (and carried from earlier nights by
:mod:`skillopt_sleep.night.archive_exchange`); :mod:`.budget_plan` orders them without
importing :mod:`.crossfit`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skillopt.types import EditRecord

__all__ = ["Candidate"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One proposed edit with its provenance: what its reflection saw, where it may be tested."""

    edit: EditRecord
    fold: int  # -1 for an edit carried from an earlier night
    seen: frozenset[str]
    held_out: tuple[str, ...]
    carried_nights: int = 0
    motivated_from: frozenset[str] = frozenset()  # merged proposals: every task their
    # reflections saw (``seen`` is then only what all of them saw); empty: ``seen``
    why: str = ""  # not a reflection's: why the night proposes it (:mod:`.line_removals`)

    def to_dict(self) -> dict[str, Any]:
        return {
            "edit": self.edit.to_dict(),
            "fold": self.fold,
            "seen": sorted(self.seen),
            "held_out": list(self.held_out),
            "carried_nights": self.carried_nights,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Candidate:
        return cls(
            edit=EditRecord.from_dict(data["edit"]),
            fold=int(data.get("fold", -1)),
            seen=frozenset(str(s) for s in data.get("seen", ())),
            held_out=tuple(str(s) for s in data.get("held_out", ())),
            carried_nights=int(data.get("carried_nights", 0)),
        )
