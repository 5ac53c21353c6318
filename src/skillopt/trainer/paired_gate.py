"""The trainer's gate: two skills compared on fresh, paired val samples, and one step's
candidate judged edit by edit when it fails.

One noisy sample of a few val items compared with a strict ``>`` lets a candidate win by
luck, and a re-scored skill read back from the response cache repeats its luck. So, as the
night does (:mod:`skillopt.gate`), both the skill in place and the candidate are rolled out
on every val item with fresh samples (numbered, the response cache bypassed), sample ``k``
of one paired with sample ``k`` of the other, more samples drawn only where they disagree,
and the candidate is accepted only when the paired test clears ``gate.confidence`` with no
regressed item (:func:`compare_skills`).

A step's candidate carries every edit the step selected (:func:`judge_step`). When it fails
and carries several edits, one harmful edit may be spoiling good ones, so each edit is
attributed as the night attributes a union (:func:`skillopt.gate.attribute`): the
candidate without edit ``i`` is compared with the full candidate (whose samples are reused,
not paid again) at a Bonferroni-corrected confidence; an edit whose removal makes the skill
significantly better is dropped. The skill without the dropped edits is then compared with
the current skill on samples no earlier decision saw, and that decision is the step's.

Each arm's samples live under ``<dir>/<skill hash>/s<sample id>``, so a resumed run and a
later comparison of the same skill on the same sample ids read them back from disk.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillopt.concurrency import gather_indexed
from skillopt.gate import (
    GateConfig,
    PairedSamples,
    attribute,
    compare_adaptive,
    decide_paired,
    next_samples,
)
from skillopt.trainer.core import TrainerCore
from skillopt.trainer.envs.base import RolloutResult
from skillopt.trainer.replies import EditItem
from skillopt.trainer.rollouts import rollout
from skillopt.trainer.run_context import Sample, skill_hash
from skillopt.trainer.sample_ids import FINAL_SAMPLES, STEP_SAMPLES
from skillopt.types import GateAction, GateDecision

__all__ = [
    "FINAL_SAMPLES",
    "RETEST",
    "STEP_SAMPLES",
    "Comparison",
    "Rebuild",
    "StepVerdict",
    "compare_skills",
    "judge_step",
]

RETEST = 500
"""Offset (within a step's sample ids) of the re-measurement after attribution."""

Rebuild = Callable[[Sequence[EditItem]], Awaitable[str | None]]
"""The candidate skill from a subset of the step's edits (None: it cannot be built)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """A paired decision and the samples behind it."""

    decision: GateDecision
    samples: PairedSamples[RolloutResult]

    @property
    def candidate_results(self) -> list[RolloutResult]:
        return self.samples.cand_records

    def record(self) -> dict[str, object]:
        """What a step record keeps: the decision's arithmetic and the sample counts."""
        return {
            **self.decision.arithmetic,
            "samples_baseline": sum(len(v) for v in self.samples.base.values()),
            "samples_candidate": sum(len(v) for v in self.samples.cand.values()),
        }


async def compare_skills(
    core: TrainerCore,
    base: str,
    cand: str,
    out_dir: Path,
    *,
    offset: int,
    config: GateConfig | None = None,
) -> Comparison:
    """``cand`` against ``base`` on the val items, paired, on fresh samples from ``offset``,
    under ``config`` (default: the run's ``[gate]``)."""
    config = config or core.cfg.gate
    items = {item.id: item for item in core.val}

    async def measure(
        arm: int, ids: Sequence[str], samples: range
    ) -> tuple[dict[str, list[float]], list[RolloutResult]]:
        skill = cand if arm else base
        chosen = [items[i] for i in ids]
        scores: dict[str, list[float]] = {i: [] for i in ids}
        ks = list(samples)

        async def one(j: int) -> list[RolloutResult]:
            where = out_dir / skill_hash(skill) / f"s{ks[j]}"
            return await rollout(
                core.ctx, chosen, skill, where, Sample(sample_id=ks[j], fresh=True)
            )

        records: list[RolloutResult] = []
        for results in await gather_indexed(one, len(ks)):  # sample order, whatever finished first
            for r in results:
                scores[r.task_id].append(math.nan if r.error else config.score(r.hard, r.soft))
            records.extend(results)
        return scores, records

    plan = functools.partial(next_samples, config=config)
    got = await compare_adaptive(measure, list(items), config=config, plan=plan, offset=offset)
    decision = decide_paired(
        got.base, got.cand, config=config, task_ids=list(items), confirm_from=got.confirm_from
    )
    return Comparison(decision=decision, samples=got)


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

    async def without(rest: Sequence[EditItem]) -> str | None:
        text = await rebuild(rest)
        return None if text is None or text == candidate else text

    async def better(whole_text: str, text: str, config: GateConfig) -> GateDecision:
        got = await compare_skills(core, whole_text, text, out_dir, offset=offset, config=config)
        return got.decision

    found = await attribute(candidate, edits, build=without, compare=better, config=core.cfg.gate)
    drop = set(found.dropped)
    attribution = [
        {
            "edit": e.summary(),
            "dropped": i in drop,
            "decision": d.arithmetic if d is not None else None,
        }
        for i, (e, d) in enumerate(zip(edits, found.decisions, strict=True))
    ]
    kept = found.kept
    text = await rebuild(kept) if drop and kept else None
    if text is None:
        return StepVerdict(text=candidate, comparison=whole, attribution=attribution)
    again = await compare_skills(core, current, text, out_dir, offset=offset + RETEST)
    return StepVerdict(
        text=text,
        comparison=again,
        dropped=tuple(edits[i] for i in found.dropped),
        attribution=attribution,
    )
