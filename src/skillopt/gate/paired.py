"""Paired comparison of two documents measured on the same tasks and samples.

The gate must not be fooled by noise: a baseline measured once can read low by chance, and
a candidate then "wins" by luck. So both arms are sampled in the same night, sample ``k`` of
the candidate on task ``t`` is paired with sample ``k`` of the baseline on ``t``, and the
decision rests on a test over the paired deltas, never on two separately measured means.

Public API::

    paired_test(baseline, candidate, *, confidence=0.9, min_delta=0.0, task_ids=None,
                confirm_from=None) -> PairedTest
    sign_flip_p(values) -> float        # P(sum of randomly signed |v| >= sum(v))
    task_settled(base, cand) -> bool    # no sample disagrees: more samples cannot help

The test is a sign-flip permutation test (exact up to 2**16 sign patterns, otherwise the
normal approximation of the same distribution): under "the candidate does nothing" every
paired delta is as likely to be positive as negative. ``min_delta`` shifts the deltas, so
"improves by more than min_delta" is what is tested. A task is *regressed* when its own
paired deltas are significantly negative at the same confidence; *untested* means no pair
differs at all (nothing on these tasks exercises the edit). The per-task regression tests
are corrected for their number (Bonferroni over the tasks that went down).

A task named in ``confirm_from`` (task -> index of its first confirmation sample) is judged
for regression on its confirmation pairs alone, corrected over the tasks confirmed: a
regression seen on the screening samples must show again on fresh ones, at a level that
accounts for every task that was screened (:func:`skillopt.gate.sampling.confirm_suspects`).

Inside :func:`paired_test`, a candidate sample that is missing or not finite counts 0 and a
pair whose baseline sample is missing is left out. The decision (:func:`skillopt.gate.
decide_paired`) never gets that far on a missing sample: a sample whose call failed is drawn
again (:mod:`.sampling`), and one still missing leaves the decision ``untested``
(:func:`missing_pairs`), or, for a terminal decision, stands only where every value it could
have had gives the same verdict (:mod:`.missing`): no verdict is moved by a sample's absence.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "PairedTest",
    "TaskPairs",
    "missing_pairs",
    "paired_test",
    "regressed_tasks",
    "sign_flip_p",
    "task_settled",
    "unreachable",
]

_EXACT_LIMIT = 1 << 16  # distinct partial sums kept before falling back to the normal form
_EPS = 1e-9


def sign_flip_p(values: Sequence[float]) -> float:
    """One-sided p-value of ``sum(values)`` under random signs: P(S >= observed)."""
    nonzero = [abs(v) for v in values if abs(v) > _EPS]
    if not nonzero:
        return 1.0
    observed = math.fsum(values)
    sums: dict[int, int] = {0: 1}  # sum in units of 1e-6 -> number of sign patterns
    for v in nonzero:
        step = round(v * 1e6)
        nxt: dict[int, int] = {}
        for s, count in sums.items():
            nxt[s + step] = nxt.get(s + step, 0) + count
            nxt[s - step] = nxt.get(s - step, 0) + count
        sums = nxt
        if len(sums) > _EXACT_LIMIT:
            return _normal_p(observed, nonzero)
    target = round(observed * 1e6) - 1  # ">= observed", tolerant of rounding
    hits = sum(count for s, count in sums.items() if s >= target)
    return hits / float(2 ** len(nonzero))


def _normal_p(observed: float, magnitudes: Iterable[float]) -> float:
    sd = math.sqrt(math.fsum(m * m for m in magnitudes))
    if sd <= 0:
        return 1.0
    return 0.5 * math.erfc(observed / sd / math.sqrt(2.0))


def task_settled(base: Sequence[float], cand: Sequence[float]) -> bool:
    """True when every sample of both arms agrees: more samples would not change the call.

    This is what adaptive sampling asks per task: a clean (deterministic) model settles
    after one pair, a noisy one is sampled again where its outcomes disagree.
    """
    values = [v for v in (*base, *cand) if math.isfinite(v)]
    return bool(values) and max(values) - min(values) <= _EPS


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskPairs:
    """The paired samples of one task."""

    task_id: str
    deltas: tuple[float, ...]
    baseline: float  # mean over the paired baseline samples
    candidate: float
    p_regress: float
    confirm_deltas: tuple[float, ...] = ()  # fresh pairs drawn to confirm a regression
    p_confirm: float = 1.0  # one-sided p of a regression on ``confirm_deltas`` alone

    @property
    def mean_delta(self) -> float:
        return self.candidate - self.baseline

    @property
    def confirmed(self) -> bool:
        return bool(self.confirm_deltas)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "task_id": self.task_id,
            "pairs": len(self.deltas),
            "baseline": self.baseline,
            "candidate": self.candidate,
            "delta": self.mean_delta,
            "p_regress": self.p_regress,
        }
        if self.confirmed:
            out["confirm_pairs"] = len(self.confirm_deltas)
            out["p_confirm"] = self.p_confirm
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class PairedTest:
    """The test's numbers and verdicts; ``to_dict`` is what a decision records."""

    confidence: float
    min_delta: float
    tasks: tuple[TaskPairs, ...]
    unpaired: tuple[str, ...]  # tasks with no comparable pair
    baseline: float  # task-weighted means
    candidate: float
    p_improve: float
    p_regress: float
    regressed: tuple[str, ...]  # tasks significantly worse on their own pairs

    method = "paired sign-flip permutation test (one-sided)"

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence

    @property
    def mean_delta(self) -> float:
        return self.candidate - self.baseline

    @property
    def n_pairs(self) -> int:
        return sum(len(t.deltas) for t in self.tasks)

    @property
    def changed(self) -> tuple[str, ...]:
        return tuple(t.task_id for t in self.tasks if any(abs(d) > _EPS for d in t.deltas))

    @property
    def improved(self) -> tuple[str, ...]:
        return tuple(t.task_id for t in self.tasks if t.mean_delta > _EPS)

    @property
    def untested(self) -> bool:
        """No paired sample differs: these tasks do not exercise the candidate."""
        return not self.changed

    @property
    def gains(self) -> bool:
        """The paired gain clears ``min_delta`` at the test's confidence."""
        clears = self.p_improve <= self.alpha and self.mean_delta > self.min_delta
        return bool(self.tasks) and clears

    @property
    def worse_overall(self) -> bool:
        return self.p_regress <= self.alpha and self.mean_delta < 0

    @property
    def harmful(self) -> bool:
        return bool(self.regressed) or self.worse_overall

    @property
    def passed(self) -> bool:
        return self.gains and not self.harmful

    def rule(self) -> str:
        return (
            f"p_improve {self.p_improve:.4g} <= alpha {self.alpha:.4g} and mean delta "
            f"{self.mean_delta:.4g} > min_delta {self.min_delta:.4g} and no regressed task "
            f"({len(self.regressed)}) -> {self.passed}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "confidence": self.confidence,
            "alpha": self.alpha,
            "min_delta": self.min_delta,
            "n_tasks": len(self.tasks),
            "n_pairs": self.n_pairs,
            "n_changed_tasks": len(self.changed),
            "baseline_mean": self.baseline,
            "candidate_mean": self.candidate,
            "mean_delta": self.mean_delta,
            "p_improve": self.p_improve,
            "p_regress": self.p_regress,
            "improved_ids": list(self.improved),
            "regressed_ids": list(self.regressed),
            "unpaired_ids": list(self.unpaired),
            "untested": self.untested,
            "passed": self.passed,
            "harmful": self.harmful,
            "rule": self.rule(),
        }


def unreachable(
    baseline: Mapping[str, Sequence[float]],
    candidate: Mapping[str, Sequence[float]],
    task_ids: Iterable[str],
) -> list[str]:
    """The tasks with samples under both documents, every one of them missing: a task no
    call reaches (it always fails) says nothing about either document, so it is left out
    of the decision, by name."""
    out = []
    for tid in task_ids:
        values = [*baseline.get(tid, ()), *candidate.get(tid, ())]
        if baseline.get(tid) and candidate.get(tid) and not any(map(math.isfinite, values)):
            out.append(tid)
    return out


def missing_pairs(
    baseline: Mapping[str, Sequence[float]],
    candidate: Mapping[str, Sequence[float]],
    task_ids: Iterable[str],
) -> dict[str, int]:
    """Per task, the pairs one of whose samples is missing (a call that failed and failed
    again when drawn anew); tasks with none are left out."""
    out: dict[str, int] = {}
    for tid in task_ids:
        base, cand = baseline.get(tid, ()), candidate.get(tid, ())
        lost = sum(
            not (math.isfinite(b) and math.isfinite(c)) for b, c in zip(base, cand, strict=False)
        ) + abs(len(base) - len(cand))
        if lost:
            out[tid] = lost
    return out


def _pairs(base: Sequence[float], cand: Sequence[float]) -> list[tuple[float, float]]:
    out = []
    for b, c in zip(base, cand, strict=False):
        if not math.isfinite(b):
            continue
        out.append((b, c if math.isfinite(c) else 0.0))
    return out


def paired_test(
    baseline: Mapping[str, Sequence[float]],
    candidate: Mapping[str, Sequence[float]],
    *,
    confidence: float = 0.9,
    min_delta: float = 0.0,
    task_ids: Iterable[str] | None = None,
    confirm_from: Mapping[str, int] | None = None,
) -> PairedTest:
    """Compare per-sample scores ``{task_id: [score of sample 0, 1, ...]}`` of two arms."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    alpha = 1.0 - confidence
    ids = list(dict.fromkeys(task_ids if task_ids is not None else baseline))
    split = confirm_from or {}
    tasks: list[TaskPairs] = []
    unpaired: list[str] = []
    shifted: list[float] = []
    raw: list[float] = []
    for tid in ids:
        base, cand = baseline.get(tid, ()), candidate.get(tid, ())
        pairs = _pairs(base, cand)
        if not pairs:
            unpaired.append(tid)
            continue
        deltas = tuple(c - b for b, c in pairs)
        raw.extend(deltas)
        shifted.extend(d - min_delta for d in deltas)
        first = split.get(tid)
        confirm = (
            () if first is None else tuple(c - b for b, c in _pairs(base[first:], cand[first:]))
        )
        tasks.append(
            TaskPairs(
                task_id=tid,
                deltas=deltas,
                baseline=math.fsum(b for b, _ in pairs) / len(pairs),
                candidate=math.fsum(c for _, c in pairs) / len(pairs),
                p_regress=sign_flip_p([-d for d in deltas]),
                confirm_deltas=confirm,
                p_confirm=sign_flip_p([-d for d in confirm]) if confirm else 1.0,
            )
        )
    n = len(tasks) or 1
    return PairedTest(
        confidence=confidence,
        min_delta=min_delta,
        tasks=tuple(tasks),
        unpaired=tuple(unpaired),
        baseline=math.fsum(t.baseline for t in tasks) / n,
        candidate=math.fsum(t.candidate for t in tasks) / n,
        p_improve=sign_flip_p(shifted) if tasks else 1.0,
        p_regress=sign_flip_p([-d for d in raw]) if tasks else 1.0,
        regressed=regressed_tasks(tasks, alpha),
    )


def regressed_tasks(
    tasks: Sequence[TaskPairs], alpha: float, *, lower: int | None = None
) -> tuple[str, ...]:
    """The tasks significantly worse on their own pairs.

    Each task that went down is its own test: Bonferroni over them (``lower`` of them; by
    default those of ``tasks``), so twenty-four noisy tasks do not produce a "significant"
    regression by chance alone. A confirmed task is judged on its confirmation pairs only,
    Bonferroni over the tasks confirmed."""
    n_lower = sum(t.mean_delta < 0 for t in tasks) if lower is None else lower
    confirmed = [t for t in tasks if t.confirmed]
    out: list[str] = []
    for t in tasks:
        if t.confirmed:
            worse = math.fsum(t.confirm_deltas) < 0
            if worse and t.p_confirm <= alpha / len(confirmed):
                out.append(t.task_id)
        elif t.mean_delta < 0 and t.p_regress <= alpha / max(n_lower, 1):
            out.append(t.task_id)
    return tuple(out)
