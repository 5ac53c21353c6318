"""Samples drawn and scored: :class:`Measured` (per-sample gate scores of one document pair)
and the two ways a wave is drawn (:func:`draw_scores`, :func:`sample_all`).

Anything with a replayer and a gate config draws through here (a
:class:`~skillopt_sleep.night.learn.measure.Measure` does); a sample whose call failed
scores NaN (missing), never 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from skillopt.gate import REDRAWS, GateConfig
from skillopt.types import RolloutResult, TaskRecord
from skillopt_sleep.reflect import RolloutSet
from skillopt_sleep.replay import Arm, Docs, Job, Replayer

__all__ = ["Measured", "Sampler", "draw_scores", "finite_mean", "sample_all"]


class Sampler(Protocol):
    """What drawing samples needs: the replayer and the gate config that scores them."""

    replayer: Replayer
    gate: GateConfig


def finite_mean(values: Sequence[float]) -> float:
    """The mean of the finite values (NaN when none is)."""
    finite = [v for v in values if math.isfinite(v)]
    return math.fsum(finite) / len(finite) if finite else math.nan


@dataclass(frozen=True, slots=True, kw_only=True)
class Measured:
    """Per-sample gate scores of one document pair on some tasks: ``{task: [s0, s1, ...]}``."""

    docs: Docs
    scores: Mapping[str, tuple[float, ...]]
    results: tuple[RolloutResult, ...] = ()
    confirm_from: Mapping[str, int] = field(default_factory=dict)  # see skillopt.gate.paired

    def rollout_sets(self, tasks: Sequence[TaskRecord]) -> list[RolloutSet]:
        """What a reflection reads: each task with its measured rollouts."""
        by_task: dict[str, list[RolloutResult]] = {}
        for r in self.results:
            by_task.setdefault(r.task_id, []).append(r)
        return [RolloutSet(task=t, results=tuple(by_task.get(t.id, ()))) for t in tasks]

    def task_means(self) -> dict[str, float]:
        """Per task, the mean over its samples (NaN when every sample failed)."""
        return {t: finite_mean(v) for t, v in self.scores.items()}

    def mean(self, task_ids: Sequence[str] | None = None) -> float:
        ids = list(task_ids) if task_ids is not None else list(self.scores)
        per = [finite_mean(self.scores.get(t, ())) for t in ids]
        per = [v for v in per if math.isfinite(v)]
        return math.fsum(per) / len(per) if per else 0.0


async def draw_scores(
    measure: Sampler,
    tasks: Sequence[TaskRecord],
    docs: Docs,
    samples: range | Mapping[str, Sequence[int]],
    phase: str,
    *,
    redraw: bool = False,
    opinions: int = 1,
    arm: Arm = Arm.ASKED,
) -> tuple[dict[str, list[float]], list[RolloutResult]]:
    """Fresh samples of each task (``samples``, or ``samples[task id]``), one wave;
    ``redraw``: a sample whose call failed is asked again, up to :data:`REDRAWS` times (the
    gate's comparisons do this themselves, :mod:`skillopt.gate.sampling`); ``opinions``:
    the judge's verdicts on each answer, the middle one scoring it
    (:attr:`~skillopt_sleep.replay.Job.opinions`); ``arm``: what the samples are for, whether
    a known answer may stand in for them (:mod:`skillopt_sleep.stand_in`)."""
    each = samples if isinstance(samples, Mapping) else {t.id: samples for t in tasks}
    jobs = [
        Job(task=t, docs=docs, sample_id=k, phase=phase, fresh=True, opinions=opinions, arm=arm)
        for t in tasks for k in each[t.id]
    ]  # fmt: skip
    results = await measure.replayer.run(jobs)
    for _ in range(REDRAWS if redraw else 0):
        failed = [i for i, r in enumerate(results) if r.error]
        if not failed:
            break
        again = await measure.replayer.run([jobs[i] for i in failed])
        for i, r in zip(failed, again, strict=True):
            results[i] = r
    out: dict[str, list[float]] = {t.id: [] for t in tasks}
    for r in results:
        out[r.task_id].append(math.nan if r.error else measure.gate.score(r.hard, r.soft))
    return out, results


async def sample_all(
    measure: Sampler, tasks: Sequence[TaskRecord], docs: Docs, *, samples: int | Mapping[str, int],
    phase: str, first: int = 0, arm: Arm = Arm.ASKED,
) -> Measured:  # fmt: skip
    """``samples`` fresh samples of every task under ``docs`` (or ``samples[task id]`` of
    each; one concurrent wave), sample ids from ``first``; ``arm`` as :func:`draw_scores`'s."""
    ids = (
        {t: range(first, first + n) for t, n in samples.items()}
        if isinstance(samples, Mapping) else range(first, first + samples)
    )  # fmt: skip
    scores, results = await draw_scores(measure, tasks, docs, ids, phase, redraw=True, arm=arm)
    return Measured(
        docs=docs, scores={k: tuple(v) for k, v in scores.items()}, results=tuple(results)
    )
