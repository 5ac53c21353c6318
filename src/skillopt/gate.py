"""The validation gate: accept an edit only on strict, measured improvement.

Public API::

    GateMetric                                   # hard | soft | mixed
    gate_score(hard, soft, *, metric, mixed_weight=0.5) -> float
    is_gate_off(mode) -> bool                    # "off" | "none" | "false" | "greedy"
    GateConfig(metric, mixed_weight, min_delta, no_regression, samples_per_task,
               confidence, max_samples_per_task)  # whether it runs: the caller's mode
    task_scores(results, *, config) -> dict[str, float]     # mean over samples per task
    task_deltas(baseline, candidate, ids) -> tuple[TaskDelta, ...]
    decide(baseline, candidate, *, config, train_ids, val_ids, edits_applied=True,
           check_leaks=True)
        -> GateDecision           # night: accept_new_best | reject | reject_unverified
    decide_greedy(n_applied) -> GateDecision     # gate off: greedy_applied | greedy_noop
    decide_trainer(current, best, candidate, *, use_gate=True, min_delta=0.0) -> GateDecision
    decide_paired(baseline, candidate, *, config, task_ids, seen=()) -> GateDecision
        # night: per-sample scores of both arms, paired; accept_new_best | reject |
        # reject_unverified (a validation task was seen by the edit's reflection) | untested

Rules (all strict; a tie rejects):

* accept only when ``candidate_mean > baseline_mean + min_delta``;
* a val task is *regressed* when its candidate score is lower, or when either side is
  missing or non-finite; with ``no_regression`` any regressed task blocks the accept;
* a task whose *baseline* is missing or non-finite is left out of both means (it cannot be
  compared); a task whose *candidate* is missing or non-finite counts 0 in the candidate
  mean (a crash never helps);
* an empty train or val set, or an id in both, is a *leak*: an accept becomes
  ``reject_unverified``.

Every decision carries its arithmetic in ``GateDecision.arithmetic``.

:func:`decide_paired` is the night's gate: both arms are sampled the same night, paired per
task and sample, and an accept needs the paired test of :mod:`skillopt.paired` to clear
``min_delta`` at ``confidence`` with no significantly regressed task.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from skillopt.errors import ConfigError
from skillopt.paired import PairedTest, paired_test
from skillopt.types import DeltaStatus, GateAction, GateDecision, RolloutResult, TaskDelta

__all__ = [
    "GateConfig",
    "GateMetric",
    "decide",
    "decide_greedy",
    "decide_paired",
    "decide_trainer",
    "gate_score",
    "is_gate_off",
    "task_deltas",
    "task_scores",
]


class GateMetric(StrEnum):
    HARD = "hard"
    SOFT = "soft"
    MIXED = "mixed"


_OFF_MODES = frozenset({"off", "none", "false", "greedy"})


def is_gate_off(mode: str) -> bool:
    """True for the gate-mode spellings that mean "apply edits greedily"."""
    return mode.strip().lower() in _OFF_MODES


def _metric(metric: GateMetric | str) -> GateMetric:
    try:
        return GateMetric(metric)
    except ValueError as exc:
        raise ConfigError(f"unknown gate metric {metric!r}", key="gate.metric") from exc


def _clamp_weight(w: float) -> float:
    if not math.isfinite(w):
        raise ConfigError(f"mixed weight must be finite, got {w!r}", key="gate.mixed_weight")
    return min(1.0, max(0.0, w))


def gate_score(
    hard: float, soft: float, *, metric: GateMetric | str, mixed_weight: float = 0.5
) -> float:
    """hard | soft | ``(1-w)*hard + w*soft`` with ``w`` clamped to [0, 1]."""
    which = _metric(metric)
    if which is GateMetric.HARD:
        return hard
    if which is GateMetric.SOFT:
        return soft
    w = _clamp_weight(mixed_weight)
    return (1.0 - w) * hard + w * soft


@dataclass(frozen=True, slots=True, kw_only=True)
class GateConfig:
    """How the gate scores and decides. ``samples_per_task`` is how many fresh samples the
    caller should draw per val task for noisy targets; :func:`task_scores` averages them."""

    metric: GateMetric = GateMetric.MIXED
    mixed_weight: float = 0.5
    min_delta: float = 0.0
    no_regression: bool = False
    samples_per_task: int = 1
    confidence: float = 0.9  # paired gate: one-sided confidence of the improvement
    max_samples_per_task: int = 8  # paired gate: adaptive sampling stops here
    confirm_samples: int = 0  # paired gate: fresh pairs that confirm a lone regression (0: off)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metric", _metric(self.metric))
        _clamp_weight(self.mixed_weight)
        if not math.isfinite(self.min_delta) or self.min_delta < 0:
            raise ConfigError(
                f"min_delta must be a finite number >= 0, got {self.min_delta!r}",
                key="gate.min_delta",
            )
        if isinstance(self.samples_per_task, bool) or self.samples_per_task < 1:
            raise ConfigError(
                f"samples_per_task must be >= 1, got {self.samples_per_task!r}",
                key="gate.samples_per_task",
            )
        if not 0.5 <= self.confidence < 1.0:
            raise ConfigError(
                f"confidence must be in [0.5, 1), got {self.confidence!r}", key="gate.confidence"
            )
        if isinstance(self.confirm_samples, bool) or self.confirm_samples < 0:
            raise ConfigError(
                f"confirm_samples must be >= 0, got {self.confirm_samples!r}",
                key="gate.confirm_samples",
            )
        if self.max_samples_per_task < self.samples_per_task:
            raise ConfigError(
                f"max_samples_per_task ({self.max_samples_per_task}) must be >= "
                f"samples_per_task ({self.samples_per_task})",
                key="gate.max_samples_per_task",
            )

    def score(self, hard: float, soft: float) -> float:
        return gate_score(hard, soft, metric=self.metric, mixed_weight=self.mixed_weight)


def task_scores(results: Iterable[RolloutResult], *, config: GateConfig) -> dict[str, float]:
    """Per-task gate score: the mean over that task's samples.

    A sample whose call failed (``error`` set) or whose scores are not finite is left out;
    a task with no usable sample maps to NaN, which the gate treats as missing.
    """
    sums: dict[str, list[float]] = {}
    for r in results:
        bucket = sums.setdefault(r.task_id, [])
        if r.error:
            continue
        value = config.score(r.hard, r.soft)
        if math.isfinite(value):
            bucket.append(value)
    return {tid: (sum(v) / len(v) if v else math.nan) for tid, v in sums.items()}


def _finite(scores: Mapping[str, float], tid: str) -> float | None:
    """The task's score, or None when missing or non-finite. A present non-number is a bug
    upstream (e.g. an unjudged ``None``) and raises instead of counting as a score."""
    if tid not in scores:
        return None
    value = scores[tid]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"gate score for task {tid!r} must be a number, got {value!r}")
    return float(value) if math.isfinite(value) else None


def task_deltas(
    baseline: Mapping[str, float], candidate: Mapping[str, float], ids: Iterable[str]
) -> tuple[TaskDelta, ...]:
    """Per-task comparison; missing or non-finite on either side counts as regressed."""
    out: list[TaskDelta] = []
    for tid in dict.fromkeys(ids):
        b, c = _finite(baseline, tid), _finite(candidate, tid)
        if b is None or c is None:
            status, finite = DeltaStatus.REGRESSED, False
        elif c > b:
            status, finite = DeltaStatus.IMPROVED, True
        elif c < b:
            status, finite = DeltaStatus.REGRESSED, True
        else:
            status, finite = DeltaStatus.UNCHANGED, True
        out.append(TaskDelta(task_id=tid, baseline=b, candidate=c, status=status, finite=finite))
    return tuple(out)


def _leak_reasons(train_ids: Collection[str], val_ids: Collection[str]) -> list[str]:
    reasons = []
    if not train_ids:
        reasons.append("train split is empty")
    if not val_ids:
        reasons.append("val split is empty")
    overlap = sorted(set(train_ids) & set(val_ids))
    if overlap:
        reasons.append(f"{len(overlap)} task id(s) in both train and val: {overlap[:5]}")
    return reasons


def _counts(deltas: Iterable[TaskDelta]) -> dict[str, int]:
    counts = {s.value: 0 for s in DeltaStatus}
    for d in deltas:
        counts[d.status.value] += 1
    return counts


def decide(
    baseline: Mapping[str, float],
    candidate: Mapping[str, float],
    *,
    config: GateConfig,
    train_ids: Collection[str],
    val_ids: Collection[str],
    edits_applied: bool = True,
    check_leaks: bool = True,
) -> GateDecision:
    """The night's gate over per-task val scores (already in metric space).

    ``check_leaks=False`` is for intermediate hill-climbing trials, which need a plain
    yes/no; the final decision of a night must keep the leak check on.
    """
    deltas = task_deltas(baseline, candidate, val_ids)
    compared = [d for d in deltas if d.baseline is not None]
    # fsum is exact, so the means do not depend on task order: a candidate that only
    # shuffles which tasks score what must tie (and reject), not win by rounding noise.
    n = len(compared) or 1
    base_mean = math.fsum(d.baseline or 0.0 for d in compared) / n
    cand_mean = math.fsum(d.candidate or 0.0 for d in compared) / n
    delta = cand_mean - base_mean
    threshold = base_mean + config.min_delta
    improved = bool(compared) and cand_mean > threshold
    regressed = [d.task_id for d in deltas if d.status is DeltaStatus.REGRESSED]
    blocked = config.no_regression and bool(regressed)
    leaks = _leak_reasons(train_ids, val_ids) if check_leaks else []

    reasons: list[str] = []
    if not edits_applied:
        reasons.append("no edit was applied")
    if not compared:
        reasons.append("no val task has a usable baseline score")
    elif not improved:
        reasons.append(
            f"candidate {cand_mean:.6g} is not above baseline {base_mean:.6g}"
            f" + margin {config.min_delta:.6g}"
        )
    if blocked:
        reasons.append(f"no_regression: {len(regressed)} val task(s) regressed")
    would_accept = edits_applied and improved and not blocked
    if would_accept and leaks:
        action, accepted = GateAction.REJECT_UNVERIFIED, False
        reasons.extend(leaks)
    elif would_accept:
        action, accepted = GateAction.ACCEPT_NEW_BEST, True
    else:
        action, accepted = GateAction.REJECT, False

    arithmetic: dict[str, Any] = {
        "metric": config.metric.value,
        "mixed_weight": _clamp_weight(config.mixed_weight),
        "min_delta": config.min_delta,
        "baseline_mean": base_mean,
        "candidate_mean": cand_mean,
        "delta": delta,
        "threshold": threshold,
        "rule": f"{cand_mean:.6g} > {base_mean:.6g} + {config.min_delta:.6g} -> {improved}",
        "n_val": len(deltas),
        "n_compared": len(compared),
        "counts": _counts(deltas),
        "regressed_ids": regressed,
        "no_regression": config.no_regression,
        "blocked_by_regression": blocked,
        "leaks": leaks,
        "leak_check": check_leaks,
        "reasons": reasons,
    }
    return GateDecision(
        action=action,
        accepted=accepted,
        baseline=base_mean,
        candidate=cand_mean,
        delta=delta,
        task_deltas=deltas,
        blocked_by_regression=blocked,
        leaked=bool(leaks),
        arithmetic=arithmetic,
    )


def decide_greedy(n_applied: int) -> GateDecision:
    """Gate off: keep whatever applied; no val replay, scores reported as 0."""
    applied = n_applied > 0
    return GateDecision(
        action=GateAction.GREEDY_APPLIED if applied else GateAction.GREEDY_NOOP,
        accepted=applied,
        baseline=0.0,
        candidate=0.0,
        delta=0.0,
        arithmetic={"mode": "greedy", "n_applied": n_applied},
    )


def decide_trainer(
    current: float,
    best: float,
    candidate: float,
    *,
    use_gate: bool = True,
    min_delta: float = 0.0,
) -> GateDecision:
    """The trainer's gate: compare against the current skill and the best seen so far.

    Gate on: above current and best -> ``accept_new_best``; above current only -> ``accept``;
    else ``reject``. Gate off: ``force_accept`` (current := candidate); ``arithmetic["new_best"]``
    says whether best moves too (strictly above best).
    """
    if not math.isfinite(min_delta) or min_delta < 0:
        raise ConfigError(f"min_delta must be a finite number >= 0, got {min_delta!r}")
    finite = all(math.isfinite(x) for x in (current, best, candidate))
    above_current = finite and candidate > current + min_delta
    above_best = finite and candidate > best + min_delta
    if not use_gate:
        action, accepted = GateAction.FORCE_ACCEPT, True
    elif above_current and above_best:
        action, accepted = GateAction.ACCEPT_NEW_BEST, True
    elif above_current:
        action, accepted = GateAction.ACCEPT, True
    else:
        action, accepted = GateAction.REJECT, False
    new_best = above_best if use_gate else (finite and candidate > best)
    return GateDecision(
        action=action,
        accepted=accepted,
        baseline=current,
        candidate=candidate,
        delta=candidate - current if finite else math.nan,
        arithmetic={
            "mode": "trainer" if use_gate else "trainer_gate_off",
            "current": current,
            "best": best,
            "candidate": candidate,
            "min_delta": min_delta,
            "above_current": above_current,
            "above_best": above_best,
            "new_best": new_best and accepted,
            "rule": (
                f"{candidate:.6g} > current {current:.6g} + {min_delta:.6g} -> {above_current};"
                f" > best {best:.6g} + {min_delta:.6g} -> {above_best}"
            ),
        },
    )


def decide_paired(
    baseline: Mapping[str, Sequence[float]],
    candidate: Mapping[str, Sequence[float]],
    *,
    config: GateConfig,
    task_ids: Collection[str],
    seen: Collection[str] = (),
    confirm_from: Mapping[str, int] | None = None,
) -> GateDecision:
    """The night's gate over per-sample scores (metric space) of two paired arms.

    ``task_ids`` are the tasks the candidate is validated on; ``seen`` the tasks whose
    rollouts the reflection behind the candidate saw; ``confirm_from`` where the fresh pairs
    that confirm a suspected regression start (:mod:`skillopt.paired`). Validating on a seen
    task is a leak: a would-be accept becomes ``reject_unverified``. A candidate no task
    exercised is ``untested`` (carried to a later night), not rejected as a tie.
    """
    test = paired_test(
        baseline,
        candidate,
        confidence=config.confidence,
        min_delta=config.min_delta,
        task_ids=task_ids,
        confirm_from=confirm_from,
    )
    leaks = sorted(set(task_ids) & set(seen))
    reasons = _paired_reasons(test, leaks, empty=not task_ids)
    worse = [t.task_id for t in test.tasks if t.mean_delta < 0]
    strict_block = config.no_regression and bool(worse) and test.passed
    if strict_block:
        reasons.append(f"no_regression: {len(worse)} held-out task(s) scored lower: {worse[:5]}")
    if strict_block:
        action, accepted = GateAction.REJECT, False
    elif test.passed and leaks:
        action, accepted = GateAction.REJECT_UNVERIFIED, False
    elif test.passed:
        action, accepted = GateAction.ACCEPT_NEW_BEST, True
    elif test.untested and test.tasks:
        action, accepted = GateAction.UNTESTED, False
    else:
        action, accepted = GateAction.REJECT, False
    deltas = tuple(
        TaskDelta(
            task_id=t.task_id,
            baseline=t.baseline,
            candidate=t.candidate,
            status=DeltaStatus.IMPROVED
            if t.mean_delta > 0
            else DeltaStatus.REGRESSED
            if t.mean_delta < 0
            else DeltaStatus.UNCHANGED,
        )
        for t in test.tasks
    )
    arithmetic: dict[str, Any] = {
        "mode": "paired",
        "metric": config.metric.value,
        **test.to_dict(),
        "validated_on": sorted(task_ids),
        "leaks": leaks,
        "counts": _counts(deltas),
        "reasons": reasons,
        "per_task": [t.to_dict() for t in test.tasks],
    }
    return GateDecision(
        action=action,
        accepted=accepted,
        baseline=test.baseline,
        candidate=test.candidate,
        delta=test.mean_delta,
        task_deltas=deltas,
        blocked_by_regression=bool(test.regressed) or strict_block,
        leaked=bool(leaks),
        arithmetic=arithmetic,
    )


def _paired_reasons(test: PairedTest, leaks: Sequence[str], *, empty: bool) -> list[str]:
    reasons: list[str] = []
    if empty or not test.tasks:
        reasons.append("no validation task has a comparable baseline sample")
        return reasons
    if test.untested:
        reasons.append(f"untested: no paired sample changed on {len(test.tasks)} held-out task(s)")
    if test.regressed:
        reasons.append(f"{len(test.regressed)} held-out task(s) regressed: {list(test.regressed)}")
    if not test.passed and not test.untested and not test.regressed:
        reasons.append(
            f"not significant: mean delta {test.mean_delta:.4g}, p_improve "
            f"{test.p_improve:.4g} > alpha {test.alpha:.4g}"
            if test.p_improve > test.alpha
            else f"mean delta {test.mean_delta:.4g} is not above min_delta {test.min_delta:.4g}"
        )
    if test.passed and leaks:
        reasons.append(f"{len(leaks)} validation task(s) were seen by the reflection: {leaks[:5]}")
    return reasons
