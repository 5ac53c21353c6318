"""One step's gate: the candidate against the skill in place, edit by edit when it fails.

The candidate carries every edit the step selected. It is compared with the current skill on
fresh paired val samples (:func:`skillopt.trainer.paired_gate.compare_skills`). When it fails
and it carries several edits, one harmful edit may be spoiling good ones, so each edit is
attributed as the night attributes a union (:mod:`skillopt_sleep.night.crossfit`): the candidate
without edit ``i`` is compared with the full candidate (whose samples are reused, not paid
again), at a Bonferroni-corrected confidence; an edit whose removal makes the skill
significantly better is dropped. The skill without the dropped edits is then compared with
the current skill on samples no earlier decision saw, and that decision is the step's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillopt.concurrency import gather_indexed
from skillopt.trainer.core import TrainerCore
from skillopt.trainer.paired_gate import STEP_SAMPLES, Comparison, bonferroni, compare_skills
from skillopt.trainer.replies import EditItem
from skillopt.types import GateAction

__all__ = ["RETEST", "Rebuild", "StepVerdict", "judge_step"]

RETEST = 500
"""Offset (within a step's sample ids) of the re-measurement after attribution."""

Rebuild = Callable[[Sequence[EditItem]], Awaitable[str | None]]
"""The candidate skill from a subset of the step's edits (None: it cannot be built)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepVerdict:
    """The skill the gate judged last and its decision."""

    text: str
    comparison: Comparison
    dropped: tuple[EditItem, ...] = ()
    attribution: list[dict[str, Any]] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gate": self.comparison.record()}
        if self.attribution:
            out["attribution"] = self.attribution
            out["dropped_edits"] = [e.summary() for e in self.dropped]
        return out


async def judge_step(
    core: TrainerCore,
    *,
    step: int,
    current: str,
    candidate: str,
    edits: Sequence[EditItem],
    rebuild: Rebuild | None,
    out_dir: Path,
) -> StepVerdict:
    """The step's paired decision, with edit-by-edit attribution when the whole fails."""
    offset = step * STEP_SAMPLES
    whole = await compare_skills(core, current, candidate, out_dir, offset=offset)
    action = whole.decision.action
    if whole.decision.accepted or action is GateAction.UNTESTED or len(edits) < 2:
        return StepVerdict(text=candidate, comparison=whole)
    if rebuild is None:
        return StepVerdict(text=candidate, comparison=whole)
    confidence = bonferroni(core, len(edits))

    async def without(i: int) -> Comparison | None:
        text = await rebuild([e for j, e in enumerate(edits) if j != i])
        if text is None or text == candidate:
            return None
        return await compare_skills(
            core, candidate, text, out_dir, offset=offset, confidence=confidence
        )

    loo = await gather_indexed(without, len(edits))
    drop = [i for i, c in enumerate(loo) if c is not None and c.decision.accepted]
    attribution = [
        {
            "edit": e.summary(),
            "dropped": i in drop,
            "decision": c.decision.arithmetic if c is not None else None,
        }
        for i, (e, c) in enumerate(zip(edits, loo, strict=True))
    ]
    kept = [e for i, e in enumerate(edits) if i not in drop]
    text = await rebuild(kept) if drop and kept else None
    if text is None:
        return StepVerdict(text=candidate, comparison=whole, attribution=attribution)
    again = await compare_skills(core, current, text, out_dir, offset=offset + RETEST)
    return StepVerdict(
        text=text,
        comparison=again,
        dropped=tuple(edits[i] for i in drop),
        attribution=attribution,
    )
