"""Attribution: which edits of a failing bundle spoil it (leave-one-out, or bisection).

A bundle of edits (the night's union of accepted singles, the trainer's step candidate)
can fail although most of its edits help: one harmful edit spoils the rest. Each edit is
tested by comparing the whole bundle with the bundle without it; an edit whose removal
makes the documents significantly better is dropped. With one test per edit the
confidence of each is Bonferroni-corrected (:func:`bonferroni`), so noise alone rarely
drops a good edit.

Many edits are searched by halves instead (:func:`attribute`, from :data:`SPLIT_FROM` edits
on): the bundle without a half is compared with the whole, and only a half whose removal
makes the documents significantly better is split again, down to single edits. One
spoiler among ``n`` edits then costs at most ``2 * ceil(log2(n))`` tests instead of ``n``;
each test is corrected over the most tests the search can make (:func:`planned_tests`).

The caller says how a bundle without an edit is built and how two documents are compared
(``compare(whole, without, config, left_out)``: its own sampling, the decision
:func:`skillopt.gate.decide.decide_paired` at ``config``'s corrected confidence; None when
there is nothing to compare on for that removal).

When to attribute a bundle that passed: where it lost what its edits gained alone
(:func:`lost_gains` over :func:`promised_gains`): a spoiler that only cancels the others'
gains breaks nothing that passed before, and shows nowhere else. Each removal is then
judged on the lost tasks where *the edits still in the bundle* promised more than the
removed ones did alone (:func:`cancelled_tasks`): the question is whether the removed
edits cancelled the others' gains. Where the removed edit gained as much alone, taking it
out loses its own gain by construction, and that loss must not speak for it: a spoiler
whose own gain was a lenient score (a near-miss given credit) would otherwise be kept by
the very tasks it bought.

A removal is judged on the whole (:func:`on_the_whole`): the bundle without the edits is
better when the removal's gain over the tasks it is judged on is significant, even where
one of those tasks went down. The per-task regression veto guards what is adopted, not an
edit's place in a bundle: whatever is kept after an attribution is measured again, veto
included, before anything is kept; and a spoiler's own credit on a task (a near-miss a
lenient judge scores above a plain miss) would otherwise keep it in by that one task.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from skillopt.concurrency import gather_indexed
from skillopt.gate.config import GateConfig
from skillopt.gate.decide import decide_paired
from skillopt.types import GateAction, GateDecision

__all__ = [
    "SPLIT_FROM",
    "Attribution",
    "Build",
    "Compare",
    "attribute",
    "bonferroni",
    "cancelled_tasks",
    "decide_on_passes",
    "leave_one_out",
    "lost_gains",
    "on_the_whole",
    "pass_scores",
    "planned_tests",
    "promised_gains",
]

D = TypeVar("D")
E = TypeVar("E")

Build = Callable[[Sequence[E]], Awaitable[D | None]]
"""The documents from a subset of the edits (None: they cannot be built, or are the whole)."""

Compare = Callable[[D, D, GateConfig, tuple[int, ...]], Awaitable[GateDecision | None]]
"""``compare(whole, without, config, left_out)``: is ``without`` (``whole`` without the edits
at indices ``left_out``) significantly better than ``whole``? None: nothing to compare on."""

SPLIT_FROM = 7
"""From this many edits on, :func:`attribute` bisects: fewer tests than leaving each out."""


def promised_gains(decisions: Iterable[GateDecision | None]) -> dict[str, float]:
    """Per task, the largest gain over the baseline that one of ``decisions`` (each edit's
    test alone) measured on it; tasks no decision improved are left out."""
    gains: dict[str, float] = {}
    for decision in decisions:
        for d in decision.task_deltas if decision is not None else ():
            if d.candidate is not None and d.baseline is not None and d.candidate > d.baseline:
                gains[d.task_id] = max(gains.get(d.task_id, 0.0), d.candidate - d.baseline)
    return gains


def lost_gains(
    base: Mapping[str, Sequence[float]],
    cand: Mapping[str, Sequence[float]],
    promised: Mapping[str, float],
) -> list[str]:
    """The tasks of ``promised`` on which the bundle (``cand``, paired with ``base``) kept
    less than half of the gain its edits made alone: it undid them, wholly or mostly (a
    task lifted from 0.25 to 1.0 alone that the bundle leaves at 0.38 is lost too, though
    still above the baseline). Pairs with a missing sample are left out."""
    out = []
    for task in sorted(promised):
        pairs = [
            (b, c)
            for b, c in zip(base.get(task, ()), cand.get(task, ()), strict=False)
            if math.isfinite(b) and math.isfinite(c)
        ]
        if pairs and math.fsum(c - b for b, c in pairs) / len(pairs) < promised[task] / 2:
            out.append(task)
    return out


def cancelled_tasks(
    left_out: Collection[int],
    lost: Sequence[str],
    promised_by: Sequence[Mapping[str, float]],
) -> list[str]:
    """The tasks of ``lost`` on which an edit still in the bundle promised more than the
    edits ``left_out`` did (``promised_by[i]``: per task, the gain edit ``i``'s single
    measured alone): where leaving them out can show that they cancelled the others'
    gains. Where a removed edit promised as much itself, its removal loses that gain by
    construction, and the task cannot speak for or against it."""

    def best(task: str, keep: bool) -> float:
        return max(
            (g.get(task, 0.0) for i, g in enumerate(promised_by) if (i in left_out) != keep),
            default=0.0,
        )

    return [t for t in lost if best(t, keep=True) > best(t, keep=False)]


class Scored(Protocol):
    """What :func:`pass_scores` reads of a judged sample (a rollout result)."""

    task_id: str
    sample_id: int
    hard: float
    error: str


def pass_scores(
    scores: Mapping[str, Sequence[float]], records: Iterable[Scored]
) -> dict[str, tuple[float, ...]]:
    """``scores`` (per task, one arm's samples in sample order) read as passes: 1.0 for a
    sample that passed (``hard`` 1), 0.0 for one that did not, NaN for a failed call. A
    task whose records do not match its scores one to one (a sample drawn again, a batch
    that failed whole) keeps its scores.

    A removal is judged this way (the night's attribution and masking test, the trainer's
    attribution): a rule that makes every answer a near-miss keeps most of an answer's
    partial credit while it stops the answer from passing, so on a noisy model taking it
    out of a bundle of good rules gains too little partial credit to be significant,
    though it gains whole tasks. Singles, bundles and final checks keep the gate's metric:
    partial credit is what lets one rule of a task's several show its gain alone."""
    by_task: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        value = math.nan if r.error else (1.0 if r.hard >= 1.0 else 0.0)
        by_task.setdefault(r.task_id, []).append((r.sample_id, value))
    out: dict[str, tuple[float, ...]] = {}
    for task, values in scores.items():
        got = sorted(by_task.get(task, ()), key=lambda sample: sample[0])
        read = tuple(v for _, v in got)
        matches = len({k for k, _ in got}) == len(got) == len(values) and all(
            math.isnan(a) == math.isnan(b) for a, b in zip(values, read, strict=True)
        )
        out[task] = read if matches else tuple(values)
    return out


def decide_on_passes(
    base: Mapping[str, Sequence[float]],
    base_records: Iterable[Scored],
    cand: Mapping[str, Sequence[float]],
    cand_records: Iterable[Scored],
    *,
    config: GateConfig,
    task_ids: Collection[str],
    confirm_from: Mapping[str, int] | None = None,
    terminal: bool = False,
) -> GateDecision:
    """:func:`~skillopt.gate.decide.decide_paired` on both arms read as passes
    (:func:`pass_scores`), noted ``scored_on: passes``: how a removal is decided."""
    decision = decide_paired(
        pass_scores(base, base_records), pass_scores(cand, cand_records), config=config,
        task_ids=task_ids, confirm_from=confirm_from, terminal=terminal,
    )  # fmt: skip
    return dataclasses.replace(decision, arithmetic={**decision.arithmetic, "scored_on": "passes"})


def on_the_whole(decision: GateDecision | None) -> GateDecision | None:
    """A removal's decision judged on the whole (see the module docstring): a gain whose
    only fault is a task that went down is accepted, noted ``on_the_whole``. A decision
    with a missing sample or a leak stays as it is."""
    if decision is None or decision.accepted or decision.action is not GateAction.REJECT:
        return decision
    a = decision.arithmetic
    if a.get("missing_samples") or a.get("leaks") or not a.get("regressed_ids"):
        return decision
    alpha, p = a.get("alpha"), a.get("p_improve")
    gain, floor = a.get("mean_delta"), a.get("min_delta", 0.0)
    if alpha is None or p is None or gain is None or not (p <= alpha and gain > floor):
        return decision
    note = f"significant on the whole; went down on {len(a['regressed_ids'])} of its tasks"
    return dataclasses.replace(
        decision,
        accepted=True,
        action=GateAction.ACCEPT_NEW_BEST,
        blocked_by_regression=False,
        arithmetic={**a, "on_the_whole": note},
    )


def bonferroni(confidence: float, tests: int) -> float:
    """The confidence of each of ``tests`` tests that together keep ``confidence``."""
    alpha = (1.0 - confidence) / max(1, tests)
    return 1.0 - alpha


@dataclass(frozen=True, slots=True, kw_only=True)
class Attribution(Generic[E]):
    """Per edit, the decision on the bundle without it (None: not tested alone); ``tests``:
    every comparison made, as (indices of the edits left out, its decision)."""

    edits: tuple[E, ...]
    decisions: tuple[GateDecision | None, ...]
    tests: tuple[tuple[tuple[int, ...], GateDecision], ...] = ()

    @property
    def dropped(self) -> tuple[int, ...]:
        """The indices of the edits whose removal made the documents significantly better."""
        return tuple(i for i, d in enumerate(self.decisions) if d is not None and d.accepted)

    @property
    def kept(self) -> list[E]:
        drop = set(self.dropped)
        return [e for i, e in enumerate(self.edits) if i not in drop]


async def leave_one_out(
    whole: D,
    edits: Sequence[E],
    *,
    build: Build[E, D],
    compare: Compare[D],
    config: GateConfig,
) -> Attribution[E]:
    """Every edit left out once, all at once; each bundle without one edit compared with
    ``whole`` at the Bonferroni-corrected confidence."""
    corrected = config.model_copy(update={"confidence": bonferroni(config.confidence, len(edits))})

    async def one(i: int) -> GateDecision | None:
        without = await build([e for j, e in enumerate(edits) if j != i])
        if without is None:
            return None
        return on_the_whole(await compare(whole, without, corrected, (i,)))

    decisions = await gather_indexed(one, len(edits))
    tests = tuple(((i,), d) for i, d in enumerate(decisions) if d is not None)
    return Attribution(edits=tuple(edits), decisions=tuple(decisions), tests=tests)


def planned_tests(n: int, *, split_from: int = SPLIT_FROM) -> int:
    """The most tests :func:`attribute` can make on ``n`` edits (its Bonferroni divisor):
    ``n`` left out one by one, or every node but the root of a binary split tree."""
    return max(n, 1) if n < split_from else 2 * (n - 1)


async def attribute(
    whole: D,
    edits: Sequence[E],
    *,
    build: Build[E, D],
    compare: Compare[D],
    config: GateConfig,
    split_from: int = SPLIT_FROM,
) -> Attribution[E]:
    """:func:`leave_one_out` for fewer than ``split_from`` edits; otherwise both halves
    left out at once, and each half whose removal makes the documents significantly better
    searched the same way, down to the single edits to drop."""
    if len(edits) < split_from:
        return await leave_one_out(whole, edits, build=build, compare=compare, config=config)
    tests_at = bonferroni(config.confidence, planned_tests(len(edits), split_from=split_from))
    corrected = config.model_copy(update={"confidence": tests_at})
    tests: list[tuple[tuple[int, ...], GateDecision]] = []

    async def spoils(group: tuple[int, ...]) -> bool:
        without = await build([e for j, e in enumerate(edits) if j not in group])
        if without is None:
            return False
        decision = on_the_whole(await compare(whole, without, corrected, group))
        if decision is None:
            return False
        tests.append((group, decision))
        return decision.accepted

    async def search(group: tuple[int, ...]) -> None:
        halves = (group[: len(group) // 2], group[len(group) // 2 :])
        verdicts = await gather_indexed(lambda i: spoils(halves[i]), 2)
        deeper = [h for h, bad in zip(halves, verdicts, strict=True) if bad and len(h) > 1]
        await gather_indexed(lambda i: search(deeper[i]), len(deeper))

    await search(tuple(range(len(edits))))
    decisions: list[GateDecision | None] = [None] * len(edits)
    for group, decision in tests:
        if len(group) == 1:
            decisions[group[0]] = decision
    ordered = tuple(sorted(tests, key=lambda t: (len(t[0]) * -1, t[0])))
    return Attribution(edits=tuple(edits), decisions=tuple(decisions), tests=ordered)
