"""Adaptive paired sampling: how many fresh samples each arm of a paired comparison draws.

The night's gate and the trainer's gate both compare a baseline and a candidate on the same
tasks, sample ``k`` of one arm paired with sample ``k`` of the other (:mod:`.paired`).
A clean model settles after one pair per task; a noisy one is sampled again, wave by wave
(``samples_per_task``, then 4, 8, ... up to ``max_samples_per_task``), only on the tasks
where more samples can still change the decision (:func:`next_samples`).

A candidate that would pass but for a task or two that look significantly worse is not
rejected on that look alone when ``confirm_samples`` is set: each such task draws that many
fresh pairs and is judged on them alone, corrected over the tasks confirmed
(:func:`confirm_suspects`). The per-task regression test is otherwise corrected only over
the tasks that went down, so with one task down a null edit's noise vetoes a real gain in
about one comparison in ten; a regression that is real shows again on fresh samples.

A sample whose call failed (the measure gives it a non-finite score: an error, a timeout, a
refused budget) is drawn again, up to :data:`REDRAWS` times, on the same sample id: the
pair keeps its place, and the arm that answered is read back, not asked again. One still
missing leaves the decision ``untested`` (:func:`skillopt.gate.decide_paired`).

Public API::

    sample_stages(first, most) -> list[int]
    unsettled(base, cand) -> list[str]
    lost(base, cand) -> list[str]
    next_samples(base, cand, *, config) -> list[str]
    confirm_suspects(base, cand, *, config) -> list[str]
    compare_adaptive(measure, task_ids, *, config, plan, offset) -> PairedSamples
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio

from skillopt.concurrency import gather_indexed
from skillopt.gate.config import GateConfig
from skillopt.gate.paired import paired_test, task_settled

__all__ = [
    "REDRAWS",
    "Measure",
    "PairedSamples",
    "Plan",
    "Scores",
    "compare_adaptive",
    "confirm_suspects",
    "lost",
    "next_samples",
    "sample_stages",
    "thin",
    "unsettled",
]

R = TypeVar("R")

REDRAWS = 2
"""How many more times a sample whose call failed is drawn before its decision is left
untested (each is a full call through the pool, its own retries included)."""

Scores = Mapping[str, Sequence[float]]
Plan = Callable[[Scores, Scores], Collection[str]]
"""After a wave: the tasks to sample again (none: the evidence decides)."""

Measure = Callable[[int, Sequence[str], range], Awaitable[tuple[dict[str, list[float]], list[R]]]]
"""``measure(arm, task_ids, sample_ids)``: per-sample gate scores of arm 0 (baseline) or 1
(candidate) on the tasks, and whatever per-sample records the caller keeps."""


def sample_stages(first: int, most: int) -> list[int]:
    """How many samples per task after each wave: first, then doubling up to ``most``."""
    stages = [first]
    while stages[-1] < most:
        stages.append(min(most, max(stages[-1] * 2, 4)))
    return stages


def unsettled(base: Scores, cand: Scores) -> list[str]:
    """The tasks whose samples disagree: where more samples can change the call."""
    return [t for t in base if not task_settled(base[t], cand.get(t, ()))]


def lost(base: Scores, cand: Scores) -> list[str]:
    """The tasks where a paired sample went down."""
    return [t for t in base if any(c < b for b, c in zip(base[t], cand.get(t, ()), strict=False))]


def next_samples(
    base: Scores, cand: Scores, *, config: GateConfig, thin_tasks: bool = False
) -> list[str]:
    """The tasks to sample again: where more samples can still change the decision.

    None on a pass with no sample lost, when nothing moved, on a candidate already
    significantly worse than the baseline, or on one still no better than chance after
    several samples of every task where samples disagree (either is rejected; more samples
    would only price the rejection). Once the gain is clear beyond doubt (significant at a
    tenth of the gate's alpha), the tasks that gained need no more samples: only the ones
    that lost a paired sample are sampled again, since a regression could only hide there.
    Otherwise every task whose samples disagree; with ``thin_tasks`` (a last check on every
    task, which no later decision can make up for), on such a noisy comparison with a gain
    so far (``p_improve <= 0.5``), the tasks whose few samples agree too (:func:`thin`).
    """
    test = paired_test(base, cand, confidence=config.confidence, min_delta=config.min_delta)
    if test.passed:
        down = lost(base, cand)  # a lost sample may be a regression
        return down if not down or test.p_improve <= test.alpha / 10 else unsettled(base, cand)
    if test.untested or test.harmful:
        return []
    # no better than chance even with several samples of every disagreeing task
    sampled = min((len(v) for t, v in cand.items() if not task_settled(base[t], v)), default=0)
    if sampled >= 4 and test.p_improve > 0.5:
        return []
    near = thin_tasks and test.p_improve <= 0.5  # a gain so far: thin pairs could settle it
    return unsettled(base, cand) + (thin(base, cand) if near else [])


THIN = 4
"""Agreeing samples below which a task does not count as settled once another task of the
same comparison disagreed (the model is noisy: one agreeing pair may be luck)."""


def thin(base: Scores, cand: Scores) -> list[str]:
    """On a comparison where some task's samples disagree, the tasks whose samples agree
    on fewer than :data:`THIN` pairs: under a noisy model one agreeing pair is no evidence
    that nothing changed there, and leaving it at one pair costs a real gain its power."""
    if not unsettled(base, cand):
        return []
    return [
        t for t in base
        if task_settled(base[t], cand.get(t, ())) and 0 < len(cand.get(t, ())) < THIN
    ]  # fmt: skip


def confirm_suspects(base: Scores, cand: Scores, *, config: GateConfig) -> list[str]:
    """The tasks whose regression alone vetoes a candidate that otherwise passes: the ones
    to confirm on fresh samples. None when confirmation is off, or the candidate fails (or
    is worse overall) on its own."""
    if config.confirm_samples <= 0:
        return []
    test = paired_test(base, cand, confidence=config.confidence, min_delta=config.min_delta)
    return list(test.regressed) if test.gains and not test.worse_overall else []


@dataclass(frozen=True, slots=True, kw_only=True)
class PairedSamples(Generic[R]):
    """Both arms' per-sample scores, paired by sample id, and the records behind them.
    ``confirm_from``: per confirmed task, the index of its first confirmation sample."""

    base: dict[str, list[float]]
    cand: dict[str, list[float]]
    base_records: list[R]
    cand_records: list[R]
    confirm_from: dict[str, int] = field(default_factory=dict)


async def compare_adaptive(
    measure: Measure[R],
    task_ids: Sequence[str],
    *,
    config: GateConfig,
    plan: Plan | None = None,
    offset: int = 0,
) -> PairedSamples[R]:
    """Both arms on ``task_ids``, paired by sample id, sampled adaptively.

    First ``samples_per_task`` samples of each arm (ids from ``offset``), both arms at once.
    Then, wave by wave, more samples of both arms only on the tasks ``plan`` names (by
    default :func:`unsettled`: the ones whose samples disagree), until it names none.
    Last, ``confirm_samples`` fresh pairs of each task :func:`confirm_suspects` names (sample
    ids after every screening sample, so no earlier look saw them).
    """
    choose = plan or unsettled
    stages = sample_stages(config.samples_per_task, config.max_samples_per_task)
    base, cand, b_rec, c_rec = await _wave(measure, task_ids, range(offset, offset + stages[0]))
    for done, upto in itertools.pairwise(stages):
        again = set(choose(base, cand))
        todo = [t for t in task_ids if t in again]
        if not todo:
            break
        b2, c2, b2_rec, c2_rec = await _wave(measure, todo, range(offset + done, offset + upto))
        for t in todo:
            base[t].extend(b2[t])
            cand[t].extend(c2[t])
        b_rec, c_rec = [*b_rec, *b2_rec], [*c_rec, *c2_rec]
    confirm_from: dict[str, int] = {}
    suspects = confirm_suspects(base, cand, config=config)
    if suspects:
        first = offset + stages[-1]
        samples = range(first, first + config.confirm_samples)
        b2, c2, b2_rec, c2_rec = await _wave(measure, suspects, samples)
        for t in suspects:
            confirm_from[t] = len(base[t])
            base[t].extend(b2[t])
            cand[t].extend(c2[t])
        b_rec, c_rec = [*b_rec, *b2_rec], [*c_rec, *c2_rec]
    return PairedSamples(
        base=base, cand=cand, base_records=b_rec, cand_records=c_rec, confirm_from=confirm_from
    )


async def _wave(
    measure: Measure[R], task_ids: Sequence[str], samples: range
) -> tuple[dict[str, list[float]], dict[str, list[float]], list[R], list[R]]:
    out: list[tuple[dict[str, list[float]], list[R]] | None] = [None, None]

    async def arm(i: int) -> None:
        scores, records = await measure(i, task_ids, samples)
        await _redraw(measure, i, scores, records, samples)
        out[i] = scores, records

    async with anyio.create_task_group() as tg:
        tg.start_soon(arm, 0)
        tg.start_soon(arm, 1)
    assert out[0] is not None and out[1] is not None
    return out[0][0], out[1][0], out[0][1], out[1][1]


async def _redraw(
    measure: Measure[R],
    arm: int,
    scores: dict[str, list[float]],
    records: list[R],
    samples: range,
) -> None:
    """Each missing sample of the wave drawn again on its own id, up to :data:`REDRAWS`
    times; the records of every draw are kept (a failed call happened)."""
    for _ in range(REDRAWS):
        gaps = [
            (task, k)
            for task, values in scores.items()
            if len(values) == len(samples)
            for k, value in zip(samples, values, strict=True)
            if not math.isfinite(value)
        ]
        if not gaps:
            return

        again = await gather_indexed(functools.partial(_one_sample, measure, arm, gaps), len(gaps))
        for (task, k), (got, recs) in zip(gaps, again, strict=True):
            records.extend(recs)
            if got.get(task):
                scores[task][k - samples.start] = got[task][0]


async def _one_sample(
    measure: Measure[R], arm: int, gaps: Sequence[tuple[str, int]], j: int
) -> tuple[dict[str, list[float]], list[R]]:
    task, k = gaps[j]
    return await measure(arm, [task], range(k, k + 1))
