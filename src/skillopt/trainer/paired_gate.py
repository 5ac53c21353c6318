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
(or no val item moved) and carries several edits, a harmful edit may be spoiling good ones:
a generalisation that breaks every item hides every fix beside it. Two looks, the second
only when the first finds nothing:

- **Spoilers** (:func:`skillopt.gate.attribute`, as the night attributes a union): the
  candidate without edit ``i`` against the full candidate, both on samples of their own
  (``ATTRIBUTION``: the whole's samples chose to look), at a Bonferroni-corrected
  confidence; an edit whose removal makes the skill significantly better is dropped, and
  the rest is compared with the current skill on samples no earlier decision saw
  (``RETEST``). This finds one spoiler among good edits.
- **Singles and union**, the night's cross-fitted step (:mod:`skillopt_sleep.night.
  crossfit`, steps 3 and 4; the trainer's reflection reads train items only, so the val
  items are already unseen by it): each edit alone on the current skill, on samples of
  their own (``SINGLES``, one current-skill arm they share); the edits that passed alone,
  together, on fresh samples (``SINGLES_TOGETHER``). Together they must also keep every
  item a single improved: one that came back unimproved is attributed as the night
  attributes a union (``TOGETHER_ATTRIBUTION``, the rest again at ``TOGETHER_RETEST``), on
  every model; that failing, the strongest single once more (``RETEST_SINGLE``). This
  finds good edits among two or more spoilers, a spoiler that only cancels the others'
  gains, and a lone good edit whose gain the noise beside a spoiler hid.

Every decision of a step draws from a block of sample ids of its own, so none is made on
samples an earlier decision was chosen by; a sample whose call failed is drawn again, and
one still missing leaves its decision untested (:mod:`skillopt.gate.sampling`).

An edit is dropped unless it is in the skill that passed.

Each arm's samples live under ``<dir>/<skill hash>/s<sample id>``, so a resumed run and a
later comparison of the same skill on the same sample ids read them back from disk.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillopt.atomicio import read_json_object
from skillopt.concurrency import gather_indexed
from skillopt.errors import BackendError
from skillopt.gate import (
    GateConfig,
    PairedSamples,
    attribute,
    cancelled_tasks,
    compare_adaptive,
    decide_on_passes,
    decide_paired,
    lost_gains,
    next_samples,
    promised_gains,
)
from skillopt.trainer.core import TrainerCore
from skillopt.trainer.envs.base import RolloutResult
from skillopt.trainer.replies import EditItem
from skillopt.trainer.rollouts import rollout
from skillopt.trainer.run_context import Sample, skill_hash
from skillopt.trainer.sample_ids import FINAL_SAMPLES, STEP_SAMPLES
from skillopt.types import GateAction, GateDecision

__all__ = [
    "ATTRIBUTION",
    "FINAL_SAMPLES",
    "RETEST",
    "RETEST_SINGLE",
    "SINGLES",
    "SINGLES_TOGETHER",
    "STEP_SAMPLES",
    "TOGETHER_ATTRIBUTION",
    "TOGETHER_RETEST",
    "Comparison",
    "Rebuild",
    "StepVerdict",
    "compare_skills",
    "judge_step",
]

ATTRIBUTION = 100
"""Offset (within a step's sample ids) of the whole's attribution, both arms."""
RETEST = 200
"""Offset of the whole without its spoilers, measured against the current skill."""
SINGLES = 300
"""Offset of each edit alone against the current skill."""
SINGLES_TOGETHER = 400
"""Offset of the edits that passed alone, measured together."""
TOGETHER_ATTRIBUTION = 500
"""Offset of the attribution of edits together that lost an item a single improved."""
TOGETHER_RETEST = 600
"""Offset of those edits without their spoilers, measured against the current skill."""
RETEST_SINGLE = 700
"""Offset of the strongest single's re-measurement when the edits together failed."""

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
    items: Collection[str] | None = None,
) -> Comparison:
    """``cand`` against ``base`` on the val items (or those of them in ``items``), paired, on
    fresh samples from ``offset``, under ``config`` (default: the run's ``[gate]``)."""
    config = config or core.cfg.gate
    chosen_ids = None if items is None else set(items)
    items = {item.id: item for item in core.val if chosen_ids is None or item.id in chosen_ids}

    async def measure(
        arm: int, ids: Sequence[str], samples: range
    ) -> tuple[dict[str, list[float]], list[RolloutResult]]:
        skill = cand if arm else base
        chosen = [items[i] for i in ids]
        scores: dict[str, list[float]] = {i: [] for i in ids}
        ks = list(samples)

        async def one(j: int) -> list[RolloutResult] | None:
            where = _sample_dir(out_dir / skill_hash(skill) / f"s{ks[j]}", ids)
            try:
                return await rollout(
                    core.ctx, chosen, skill, where, Sample(sample_id=ks[j], fresh=True)
                )
            except BackendError:  # a mostly broken batch: missing samples, drawn again
                return None

        records: list[RolloutResult] = []
        for results in await gather_indexed(one, len(ks)):  # sample order, whatever finished first
            if results is None:
                for i in ids:
                    scores[i].append(math.nan)
                continue
            for r in results:
                scores[r.task_id].append(math.nan if r.error else config.score(r.hard, r.soft))
            records.extend(results)
        return scores, records

    plan = functools.partial(next_samples, config=config)
    got = await compare_adaptive(measure, list(items), config=config, plan=plan, offset=offset)
    decision = decide_paired(
        got.base, got.cand, config=config, task_ids=list(items), confirm_from=got.confirm_from,
        terminal=True,
    )  # fmt: skip
    return Comparison(decision=decision, samples=got)


def _sample_dir(where: Path, ids: Sequence[str]) -> Path:
    """Where one sample of these items lives: its own directory, unless another set of
    items holds it already (a sample drawn again after its call failed, for the items
    that missed it): then a fresh one beside it, so the first set's results stay."""
    saved = where / "results.json"
    if not saved.exists():
        return where
    rows = read_json_object(saved).get("results")
    held = [r.get("id") for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
    if held == list(ids):
        return where
    n = 1
    while (where / f"again{n}").exists():
        n += 1
    return where / f"again{n}"


@dataclass(frozen=True, slots=True, kw_only=True)
class StepVerdict:
    """The skill the gate judged last and its decision."""

    text: str
    comparison: Comparison
    dropped: tuple[EditItem, ...] = ()
    attribution: list[dict[str, Any]] = field(default_factory=list)
    looks: tuple[str, ...] = ()  # the edit-by-edit looks made: "spoilers", then "singles"

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gate": self.comparison.record()}
        if self.attribution:
            out["attribution"] = self.attribution
            out["dropped_edits"] = [e.summary() for e in self.dropped]
            out["looks"] = list(self.looks)
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
    """The step's paired decision; when the whole fails, edit by edit.

    1. The whole candidate against the current skill (fresh samples from the step's block).
    2. It failed (or no item moved) and carries several edits: leave-one-out attribution
       (:func:`_spoilers`); the skill without the spoilers is measured again (``RETEST``).
    3. That failing too, the night's singles and union (:func:`_singles_and_union`).
    """
    offset = step * STEP_SAMPLES
    whole = await compare_skills(core, current, candidate, out_dir, offset=offset)
    # an untested whole (no item moved) is not a tie either: a harmful edit that breaks
    # every item the skill still fails hides the fixes beside it
    if whole.decision.accepted or len(edits) < 2 or rebuild is None:
        return StepVerdict(text=candidate, comparison=whole)
    verdict = await _spoilers(core, current, candidate, edits, rebuild, out_dir, whole, offset)
    if verdict.comparison.decision.accepted:
        return verdict
    got = await _singles_and_union(core, current, candidate, edits, rebuild, out_dir, offset, whole)
    return dataclasses.replace(
        got if got.comparison.decision.accepted else verdict, looks=("spoilers", "singles")
    )


async def _spoilers(
    core: TrainerCore,
    current: str,
    candidate: str,
    edits: Sequence[EditItem],
    rebuild: Rebuild,
    out_dir: Path,
    whole: Comparison,
    offset: int,
) -> StepVerdict:
    """Leave-one-out attribution of the failed whole; the rest measured again."""

    async def without(rest: Sequence[EditItem]) -> str | None:
        text = await rebuild(rest)
        return None if text is None or text == candidate else text

    async def better(
        whole_text: str, text: str, config: GateConfig, left_out: tuple[int, ...]
    ) -> GateDecision:
        got = await compare_skills(
            core, whole_text, text, out_dir, offset=offset + ATTRIBUTION, config=config
        )
        return _on_passes(got.samples, config)

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
        return StepVerdict(
            text=candidate, comparison=whole, attribution=attribution, looks=("spoilers",)
        )
    again = await compare_skills(core, current, text, out_dir, offset=offset + RETEST)
    return StepVerdict(
        text=text,
        comparison=again,
        dropped=tuple(edits[i] for i in found.dropped),
        attribution=attribution,
        looks=("spoilers",),
    )


async def _singles_and_union(
    core: TrainerCore,
    current: str,
    candidate: str,
    edits: Sequence[EditItem],
    rebuild: Rebuild,
    out_dir: Path,
    offset: int,
    whole: Comparison,
) -> StepVerdict:
    """Each edit alone on the current skill; the ones that passed together on fresh samples;
    failing that, the strongest single once more. When no edit alone builds a skill of its
    own (each is the current skill or the whole candidate), the whole's comparison stands."""
    singles = await _singles(core, current, candidate, edits, rebuild, out_dir, offset)
    attribution = [
        {
            "edit": e.summary(),
            "dropped": not (got is not None and got[1].decision.accepted),
            "decision": got[1].decision.arithmetic if got is not None else None,
        }
        for e, got in zip(edits, singles, strict=True)
    ]
    passed = [i for i, got in enumerate(singles) if got is not None and got[1].decision.accepted]
    last = next((got[1] for got in singles if got is not None), whole)
    tries: list[tuple[list[int], int]] = [(passed, SINGLES_TOGETHER)] if passed else []
    if len(passed) > 1:
        strongest = max(passed, key=lambda i: _gain(singles[i]))
        tries.append(([strongest], RETEST_SINGLE))
    for kept, at in tries:
        text = await rebuild([edits[i] for i in kept])
        if text is None:
            continue
        last = await compare_skills(core, current, text, out_dir, offset=offset + at)
        if at == SINGLES_TOGETHER and len(kept) > 1:
            each = [promised_gains([got[1].decision]) if (got := singles[i]) else {}
                    for i in kept]  # fmt: skip
            gains = promised_gains(got[1].decision for i in kept if (got := singles[i]))
            lost = lost_gains(last.samples.base, last.samples.cand, gains)
            if lost or not last.decision.accepted:
                kept, text, last = await _together_spoilers(
                    core, current, text, [edits[i] for i in kept], kept, rebuild, out_dir,
                    offset, lost or sorted(gains), last, promised_by=each if lost else None,
                )  # fmt: skip
        if last.decision.accepted:
            return StepVerdict(
                text=text,
                comparison=last,
                dropped=tuple(e for i, e in enumerate(edits) if i not in kept),
                attribution=[
                    {**row, "dropped": i not in kept} for i, row in enumerate(attribution)
                ],
            )
    return StepVerdict(text=candidate, comparison=last, attribution=attribution)


async def _together_spoilers(
    core: TrainerCore,
    current: str,
    text: str,
    kept_edits: Sequence[EditItem],
    kept: list[int],
    rebuild: Rebuild,
    out_dir: Path,
    offset: int,
    on: Sequence[str],
    together: Comparison,
    *,
    promised_by: Sequence[Mapping[str, float]] | None = None,
) -> tuple[list[int], str, Comparison]:
    """The edits together that lost an item a single improved (or failed), attributed on
    the items the singles improved, on samples of its own; the rest measured again. What
    the caller keeps: ``kept`` without the spoilers and its comparison, or the edits
    together as they were when nothing is dropped. ``promised_by`` (per edit, the items
    its single improved; given when ``on`` are lost items): each removal is judged on the
    lost items the edits left in promised (:func:`skillopt.gate.cancelled_tasks`)."""
    config = core.cfg.gate

    async def without(rest: Sequence[EditItem]) -> str | None:
        built = await rebuild(rest)
        return None if built is None or built == text else built

    async def better(
        whole_text: str, other: str, cfg: GateConfig, left_out: tuple[int, ...]
    ) -> GateDecision | None:
        items = set(on if promised_by is None else cancelled_tasks(left_out, on, promised_by))
        if not items:  # the removed edits cancelled nothing another edit promised
            return None
        got = await compare_skills(
            core, whole_text, other, out_dir, offset=offset + TOGETHER_ATTRIBUTION,
            config=cfg, items=items,
        )  # fmt: skip
        return _on_passes(got.samples, cfg)

    found = await attribute(text, kept_edits, build=without, compare=better, config=config)
    if not found.dropped or not found.kept:
        if found.dropped:  # every edit dropped: nothing together stands
            return kept, text, _rejected(together, "every edit together spoils the others")
        return kept, text, together
    rest = [kept[i] for i in range(len(kept)) if i not in set(found.dropped)]
    rest_text = await rebuild(found.kept)
    if rest_text is None:
        return kept, text, _rejected(together, "the edits without their spoilers build no skill")
    again = await compare_skills(core, current, rest_text, out_dir, offset=offset + TOGETHER_RETEST)
    return rest, rest_text, again


def _on_passes(samples: PairedSamples[RolloutResult], cfg: GateConfig) -> GateDecision:
    """A removal decided on what passes, as the night decides one."""
    return decide_on_passes(
        samples.base, samples.base_records, samples.cand, samples.cand_records, config=cfg,
        task_ids=list(samples.base), confirm_from=samples.confirm_from, terminal=True,
    )  # fmt: skip


def _rejected(comparison: Comparison, why: str) -> Comparison:
    """``comparison`` as a rejection (its samples kept), for the reason given."""
    d = comparison.decision
    arithmetic = {**d.arithmetic, "reasons": [*d.arithmetic.get("reasons", []), why]}
    decision = dataclasses.replace(
        d, action=GateAction.REJECT, accepted=False, arithmetic=arithmetic
    )
    return dataclasses.replace(comparison, decision=decision)


def _gain(single: tuple[str, Comparison] | None) -> float:
    if single is None:
        return -math.inf
    return float(single[1].decision.delta)


async def _singles(
    core: TrainerCore,
    current: str,
    candidate: str,
    edits: Sequence[EditItem],
    rebuild: Rebuild,
    out_dir: Path,
    offset: int,
) -> list[tuple[str, Comparison] | None]:
    """Each edit alone on the current skill, compared with it (None: it builds no new skill)."""
    texts: list[str | None] = []
    for e in edits:
        text = await rebuild([e])
        texts.append(None if text is None or text in (current, candidate) else text)

    async def one(i: int) -> tuple[str, Comparison] | None:
        text = texts[i]
        if text is None:
            return None
        return text, await compare_skills(core, current, text, out_dir, offset=offset + SINGLES)

    return await gather_indexed(one, len(edits))
