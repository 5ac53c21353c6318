"""The trainer's noise-robust gate: two skills compared on fresh, paired val samples.

One noisy sample of a few val items compared with a strict ``>`` lets a candidate win by
luck, and a re-scored skill read back from the response cache repeats its luck. So, as the
night does (:func:`skillopt.gate.decide_paired`), both the skill in place and the candidate
are rolled out on every val item with fresh samples (numbered, the response cache bypassed),
sample ``k`` of one paired with sample ``k`` of the other, more samples drawn only where
they disagree (:func:`skillopt.paired_sampling.compare_adaptive`), and the candidate is
accepted only when the paired test clears the configured confidence with no regressed item.

Each arm's samples live under ``<dir>/<skill hash>/s<sample id>``, so a resumed run and a
later comparison of the same skill on the same sample ids read them back from disk.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from skillopt.concurrency import gather_indexed
from skillopt.gate import GateConfig, decide_paired
from skillopt.paired_sampling import PairedSamples, compare_adaptive, next_samples
from skillopt.trainer.core import TrainerCore
from skillopt.trainer.envs.base import RolloutResult
from skillopt.trainer.sample_ids import FINAL_SAMPLES, STEP_SAMPLES
from skillopt.trainer.steps import Sample, rollout, skill_hash
from skillopt.types import GateDecision

__all__ = [
    "FINAL_SAMPLES",
    "STEP_SAMPLES",
    "Comparison",
    "bonferroni",
    "compare_skills",
    "gate_config",
]


def gate_config(core: TrainerCore, *, confidence: float | None = None) -> GateConfig:
    """The shared gate's settings from the trainer's ``[evaluation]`` section."""
    ev = core.cfg.evaluation
    return GateConfig(
        metric=ev.gate_metric,
        mixed_weight=ev.mixed_weight,
        min_delta=ev.gate_min_delta,
        samples_per_task=ev.gate_samples,
        max_samples_per_task=ev.gate_max_samples,
        confirm_samples=ev.gate_confirm_samples,
        confidence=ev.gate_confidence if confidence is None else confidence,
    )


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
    confidence: float | None = None,
) -> Comparison:
    """``cand`` against ``base`` on the val items, paired, on fresh samples from ``offset``."""
    config = gate_config(core, confidence=confidence)
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


def bonferroni(core: TrainerCore, tests: int) -> float:
    """The confidence of one of ``tests`` attribution tests (so noise rarely drops a good
    edit)."""
    alpha = (1.0 - core.cfg.evaluation.gate_confidence) / max(1, tests)
    return 1.0 - alpha
