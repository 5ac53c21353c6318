"""Two documents measured side by side: both arms on the same tasks, paired by sample id.

Every decision of the learning chain (a single, a union, an attribution, the final check)
measures through :func:`compare`; :func:`apply_to` builds the documents an edit set makes,
and :func:`clear_pass` is the gate's sampling plan under the night's settings.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from skillopt.concurrency import gather_indexed
from skillopt.gate import GateConfig, Plan, compare_adaptive, next_samples, unsettled
from skillopt.types import EditRecord, EditTarget, RolloutResult
from skillopt.types import TaskRecord as Task
from skillopt_sleep.night.learn.agree import apply_learned
from skillopt_sleep.night.learn.samples import Measured, draw_scores
from skillopt_sleep.replay import Arm, Docs

if TYPE_CHECKING:
    from skillopt_sleep.night.learn.measure import Measure

__all__ = ["apply_to", "clear_pass", "compare"]


async def compare(
    measure: Measure,
    tasks: Sequence[Task],
    base: Docs,
    cand: Docs,
    *,
    phase: str,
    plan: Plan = unsettled,
    offset: int = 0,
) -> tuple[Measured, Measured]:
    """Both arms on ``tasks``, paired by sample id, sampled adaptively.

    First ``samples_per_task`` samples of each arm (samples the baseline already has come
    from the replayer's memory, not a new call). Then, wave by wave (4, 8, ... up to
    ``max_samples_per_task``), more samples of both arms only on the tasks ``plan`` names
    (by default the ones whose samples disagree), until it names none. A clean model pays
    one pair per unchanged task. ``offset`` moves the sample ids (:data:`FRESH`: a confirmatory
    measurement on samples no earlier decision saw).

    On a night the noise probe found consistent, one pair per task is all there is: more
    samples would repeat its answers (and verdicts), and a test counting them would find
    certainty in one task. The first wave decides, with no confirmation pairs. Its
    candidate arm is always asked (:attr:`Arm.CANDIDATE`); its baseline arm is read back
    (:attr:`Arm.READ_BACK`: the pair's known answer, no attempt, its own verdict; see
    :mod:`skillopt_sleep.stand_in`), but a read-back that moves is asked for real and, once
    the judge contradicted itself, every changed pair is judged again (:func:`_settle_pairs`).
    On any other night both arms are asked.
    """
    by_id = {t.id: t for t in tasks}
    if measure.waiting():  # handoff: nothing is chosen from a comparison missing answers
        return (Measured(docs=base, scores={}, results=()),
                Measured(docs=cand, scores={}, results=()))  # fmt: skip

    async def arm(
        i: int, ids: Sequence[str], samples: range
    ) -> tuple[dict[str, list[float]], list[RolloutResult]]:
        if samples.start != offset and measure.waiting():
            return {t: [] for t in ids}, []  # handoff: no wave chosen before the answers
        docs, drawn_as = (cand, Arm.CANDIDATE) if i else (base, measure.baseline_arm())
        return await draw_scores(
            measure, [by_id[t] for t in ids], docs, samples, phase, arm=drawn_as
        )

    config = measure.gate
    if measure.noise.consistent_tonight:  # another sample of a task repeats the first
        plan, config = _first_wave_only, config.model_copy(update={"confirm_samples": 0})
    got = await compare_adaptive(
        arm, [t.id for t in tasks], config=config, plan=plan, offset=offset
    )
    drawn = (_drawn(got.base_records), _drawn(got.cand_records))
    scores = (_tuples(got.base), _tuples(got.cand))
    if measure.noise.consistent_tonight:
        drawn, scores = await _settle_pairs(measure, by_id, (base, cand), drawn, scores, phase)
    return (
        Measured(docs=base, scores=scores[0], results=drawn[0], confirm_from=got.confirm_from),
        Measured(docs=cand, scores=scores[1], results=drawn[1], confirm_from=got.confirm_from),
    )


OPINIONS = 3
"""The judge's verdicts on each answer of a changed pair once the judge was seen to
contradict itself on a consistent night (:func:`_judge_changed_again`)."""

Arms = tuple[tuple[RolloutResult, ...], tuple[RolloutResult, ...]]
ArmScores = tuple[dict[str, tuple[float, ...]], dict[str, tuple[float, ...]]]


async def _judge_changed_again(
    measure: Measure,
    by_id: Mapping[str, Task],
    docs: tuple[Docs, Docs],
    drawn: Arms,
    scores: ArmScores,
    phase: str,
) -> tuple[Arms, ArmScores]:
    """Both arms of every changed pair (a sample whose answers differ in the two arms)
    scored by the middle of :data:`OPINIONS` verdicts of the judge, the answers not asked
    again.

    On a night whose model answers consistently a comparison is one pair per task, each
    answer judged once: when the judge scores one answer two ways (seen tonight:
    ``Replayer.judge_noise``), one mistaken verdict moves a task that did not change, or
    hides one that did, and where the mistake falls (which sample, which night) decides.
    A pair whose answers are the same cannot move (both arms read one verdict: the same
    request), so only the changed pairs' answers are judged again, until two verdicts of
    three agree."""
    score = measure.gate.score
    by_sample = [{(r.task_id, r.sample_id): r for r in arm} for arm in drawn]
    changed: dict[str, list[int]] = {}
    for (task_id, sample_id), b in by_sample[0].items():
        c = by_sample[1].get((task_id, sample_id))
        if c is None or b.error or c.error:
            continue
        if b.response != c.response:
            changed.setdefault(task_id, []).append(sample_id)
    if not changed:
        return drawn, scores
    tasks = [by_id[t] for t in changed]

    async def again(i: int) -> list[RolloutResult]:  # both arms at once
        return (await draw_scores(measure, tasks, docs[i], changed, phase, opinions=OPINIONS))[1]

    judged = await gather_indexed(again, 2)
    new_drawn: list[tuple[RolloutResult, ...]] = []
    new_scores: list[dict[str, tuple[float, ...]]] = []
    for i in (0, 1):
        merged = {**by_sample[i], **{(r.task_id, r.sample_id): r for r in judged[i]}}
        new_drawn.append(tuple(merged.values()))
        new_scores.append(_rescored(score, merged, scores[i], changed))
    return (new_drawn[0], new_drawn[1]), (new_scores[0], new_scores[1])


async def _settle_pairs(
    measure: Measure,
    by_id: Mapping[str, Task],
    docs: tuple[Docs, Docs],
    drawn: Arms,
    scores: ArmScores,
    phase: str,
) -> tuple[Arms, ArmScores]:
    """A consistent night's one pair per task made sure of: a read-back that moves asked
    for real, then (once the judge contradicted itself) every changed pair judged again."""
    drawn, scores = await _ask_deciding_read_backs(measure, by_id, docs[0], drawn, scores, phase)
    if measure.replayer.judge_noise:
        drawn, scores = await _judge_changed_again(measure, by_id, docs, drawn, scores, phase)
    return drawn, scores


async def _ask_deciding_read_backs(
    measure: Measure,
    by_id: Mapping[str, Task],
    base: Docs,
    drawn: Arms,
    scores: ArmScores,
    phase: str,
) -> tuple[Arms, ArmScores]:
    """The baseline arm's read-backs of every pair that moves (its score differs from the
    candidate's) asked for real, at the same sample ids.

    A read-back stands in for an answer the model would repeat; a pair that moves is what
    the decision turns on, and one answer read back from another decision's sample would
    carry that sample's mistake (a near-miss, a judge's wrong verdict) into this one. Asked
    again, the pair is two real answers; one that differs from the answer read back turns
    read-back off for the night (:mod:`skillopt_sleep.stand_in`). The pairs that do not
    move, most of them, stay read back: they could not change the decision."""
    score, replayer = measure.gate.score, measure.replayer
    cand = {(r.task_id, r.sample_id): r for r in drawn[1]}
    moved: dict[str, list[int]] = {}
    for r in drawn[0]:
        c = cand.get((r.task_id, r.sample_id))
        if c is None or r.error or c.error:
            continue
        if _gate_score(score, r) != _gate_score(score, c) and replayer.was_read_back(
            by_id[r.task_id], base, r.sample_id
        ):
            moved.setdefault(r.task_id, []).append(r.sample_id)
    if not moved:
        return drawn, scores
    _, asked = await draw_scores(measure, [by_id[t] for t in moved], base, moved, phase)
    merged = {(r.task_id, r.sample_id): r for r in drawn[0]}
    merged.update({(r.task_id, r.sample_id): r for r in asked if not r.error})
    per_task = _rescored(score, merged, scores[0], moved)
    return (tuple(merged.values()), drawn[1]), (per_task, scores[1])


def _rescored(
    score: Callable[[float, float], float],
    merged: Mapping[tuple[str, int], RolloutResult],
    scores: Mapping[str, tuple[float, ...]],
    tasks: Collection[str],
) -> dict[str, tuple[float, ...]]:
    """``scores`` with each of ``tasks`` scored again from ``merged`` (by (task, sample
    id)), in sample order, as the arms pair them."""
    per_task = dict(scores)
    ordered: dict[str, list[tuple[int, float]]] = {t: [] for t in tasks}
    for (task_id, k), r in merged.items():
        if task_id in ordered:
            ordered[task_id].append((k, _gate_score(score, r)))
    for t, pairs in ordered.items():
        per_task[t] = tuple(v for _, v in sorted(pairs))
    return per_task


def _tuples(scores: Mapping[str, Sequence[float]]) -> dict[str, tuple[float, ...]]:
    return {k: tuple(v) for k, v in scores.items()}


def _gate_score(score: Any, r: RolloutResult) -> float:
    return math.nan if r.error else float(score(r.hard, r.soft))


def _first_wave_only(
    base: Mapping[str, Sequence[float]], cand: Mapping[str, Sequence[float]]
) -> list[str]:
    return []


def _drawn(records: Sequence[RolloutResult]) -> tuple[RolloutResult, ...]:
    """One record per sample: a sample drawn again after its call failed counts by its last
    draw (an outage is judged on what is missing, not on each failure redrawn)."""
    last: dict[tuple[str, int, str, str], RolloutResult] = {}
    for r in records:
        last[(r.task_id, r.sample_id, r.skill_hash, r.memory_hash)] = r
    return tuple(last.values())


def apply_to(
    docs: Docs, edits: Sequence[EditRecord], target: EditTarget | None = None
) -> tuple[Docs, Any]:
    """``edits``, each to its target's learned block, the other document kept in agreement
    (:func:`.agree.apply_learned`); the application's text is ``target``'s (by default the
    first edit's)."""
    main = target or (edits[0].target if edits else EditTarget.SKILL)
    return apply_learned(docs, edits, main)


def clear_pass(gate: GateConfig) -> Plan:
    """The gate's sampling plan (:func:`next_samples`) under the night's gate settings."""
    return functools.partial(next_samples, config=gate)
