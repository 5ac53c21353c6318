"""The gate's decisions: the night's paired one, the greedy one (gate off), the trainer's.

* :func:`decide_paired`: two documents' per-sample scores on the same tasks, paired per
  task and sample (:mod:`.paired`); accept only when the paired gain clears ``min_delta`` at
  the configured confidence with no significantly regressed task (a regression suspected on
  the screening samples is judged on its confirmation pairs, :mod:`.sampling`). Validating
  on a task the edit's reflection saw is a leak (``reject_unverified``); a candidate no task
  exercised is ``untested``, not a tie.
* :func:`decide_greedy`: ``gate.mode`` greedy or off: keep whatever applied, no measurement.
* :func:`decide_trainer`: the trainer's unpaired rule for one val score against the current
  and the best skill (its gate-off path, and a candidate identical to the current skill);
  :func:`trainer_outcome` and :func:`paired_outcome` say what either decision does to the
  loop's current and best skill.

Every decision carries its arithmetic in ``GateDecision.arithmetic``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skillopt.errors import ConfigError
from skillopt.gate.config import GateConfig
from skillopt.gate.missing import Bounds, bounds
from skillopt.gate.paired import PairedTest, missing_pairs, paired_test, unreachable
from skillopt.types import DeltaStatus, GateAction, GateDecision, RolloutResult, TaskDelta

__all__ = [
    "GateOutcome",
    "decide_greedy",
    "decide_paired",
    "decide_trainer",
    "paired_outcome",
    "task_scores",
    "trainer_outcome",
]


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


def _counts(deltas: Iterable[TaskDelta]) -> dict[str, int]:
    counts = {s.value: 0 for s in DeltaStatus}
    for d in deltas:
        counts[d.status.value] += 1
    return counts


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
    terminal: bool = False,
) -> GateDecision:
    """The night's gate over per-sample scores (metric space) of two paired arms.

    ``task_ids`` are the tasks the candidate is validated on; ``seen`` the tasks whose
    rollouts the reflection behind the candidate saw; ``confirm_from`` where the fresh pairs
    that confirm a suspected regression start (:mod:`skillopt.gate.paired`). Validating on a seen
    task is a leak: a would-be accept becomes ``reject_unverified``. A candidate no task
    exercised is ``untested`` (carried to a later night), not rejected as a tie.

    A sample still missing after it was drawn again (:mod:`.sampling`) leaves the decision
    ``untested`` too: its absence must not move a verdict either way. A ``terminal``
    decision (nothing later reads it task by task: the final check, ``adopt --edit``, a
    restore, the trainer's step) stands instead when every value the missing samples could
    have had gives the same action (:mod:`.missing`). A task whose every sample under both
    documents is missing (no call reaches it) is left out, by name
    (``arithmetic["unreachable"]``).
    """
    gone = unreachable(baseline, candidate, task_ids)
    if gone:
        task_ids = [t for t in task_ids if t not in set(gone)]
    missing = missing_pairs(baseline, candidate, task_ids)
    confidence, min_delta = config.confidence, config.min_delta
    test = paired_test(baseline, candidate, confidence=confidence, min_delta=min_delta,
                       task_ids=task_ids, confirm_from=confirm_from)  # fmt: skip
    leaks = sorted(set(task_ids) & set(seen))
    reasons = _paired_reasons(test, leaks, empty=not task_ids)
    settled = None
    if missing and terminal:
        found = bounds(baseline, candidate, confidence=confidence, min_delta=min_delta,
                       task_ids=task_ids, confirm_from=confirm_from)  # fmt: skip
        settled = _settled_despite(found, config, leaks)
    if missing:
        reasons.append(_missing_reason(missing, settled))
    worse = [t.task_id for t in test.tasks if t.mean_delta < 0]
    strict_block = config.no_regression and bool(worse) and test.passed
    if strict_block:
        reasons.append(f"no_regression: {len(worse)} held-out task(s) scored lower: {worse[:5]}")
    action = settled or _paired_action(
        test, missing=bool(missing), strict_block=strict_block, leaks=leaks
    )
    accepted = action is GateAction.ACCEPT_NEW_BEST
    deltas = _task_deltas(test)
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
    if missing or gone:
        arithmetic["missing_samples"] = missing
        arithmetic["unreachable"] = gone
    return GateDecision(
        action=action,
        accepted=accepted,
        baseline=test.baseline,
        candidate=test.candidate,
        delta=test.mean_delta,
        task_deltas=deltas,
        blocked_by_regression=(not missing or settled is GateAction.REJECT)
        and (bool(test.regressed) or strict_block),
        leaked=bool(leaks),
        arithmetic=arithmetic,
    )


def _task_deltas(test: PairedTest) -> tuple[TaskDelta, ...]:
    def status(delta: float) -> DeltaStatus:
        if delta > 0:
            return DeltaStatus.IMPROVED
        return DeltaStatus.REGRESSED if delta < 0 else DeltaStatus.UNCHANGED

    return tuple(
        TaskDelta(
            task_id=t.task_id,
            baseline=t.baseline,
            candidate=t.candidate,
            status=status(t.mean_delta),
        )
        for t in test.tasks
    )


def _missing_reason(missing: Mapping[str, int], settled: GateAction | None) -> str:
    lost = (
        f"{sum(missing.values())} sample(s) on {len(missing)} task(s) could not be drawn, "
        f"even again: {sorted(missing)[:5]}"
    )
    if settled is None:
        return f"untested: {lost}"
    return f"{lost}; the verdict is {settled.value} whatever they would have scored"


def _settled_despite(
    found: Bounds | None, config: GateConfig, leaks: Sequence[str]
) -> GateAction | None:
    """The action both bounds of a decision with missing samples agree on (None: they
    differ, or no bound is known). A rejection stands only when a pair with both samples
    drawn differs: otherwise a fill that changes nothing would make it ``untested``."""
    if found is None:
        return None

    def action(test: PairedTest) -> GateAction:
        lower = any(t.mean_delta < 0 for t in test.tasks)
        strict = config.no_regression and lower and test.passed
        return _paired_action(test, missing=False, strict_block=strict, leaks=leaks)

    worst, best = action(found.worst), action(found.best)
    if worst is not best or (worst is GateAction.UNTESTED) or not found.changed:
        return None
    return worst


def _paired_action(
    test: PairedTest, *, missing: bool, strict_block: bool, leaks: Sequence[str]
) -> GateAction:
    if missing:
        return GateAction.UNTESTED
    if strict_block:
        return GateAction.REJECT
    if test.passed:
        return GateAction.REJECT_UNVERIFIED if leaks else GateAction.ACCEPT_NEW_BEST
    if test.untested and test.tasks:
        return GateAction.UNTESTED
    return GateAction.REJECT


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


@dataclass(frozen=True, slots=True, kw_only=True)
class GateOutcome:
    """A decision in the trainer loop's terms: does the candidate become current, best?"""

    action: GateAction
    becomes_current: bool
    becomes_best: bool
    decision: GateDecision


def trainer_outcome(
    *, candidate: float, current: float, best: float, use_gate: bool
) -> GateOutcome:
    """Strict improvement only (ties reject): above current and best -> new best; above
    current only -> accept. With the gate off the candidate is forced in and becomes best
    only on a strict improvement over best."""
    decision = decide_trainer(current, best, candidate, use_gate=use_gate)
    return GateOutcome(
        action=decision.action,
        becomes_current=decision.accepted,
        becomes_best=bool(decision.arithmetic.get("new_best")),
        decision=decision,
    )


def paired_outcome(decision: GateDecision) -> GateOutcome:
    """A paired decision in the loop's terms: a pass is significantly better than the skill
    in place, which is at least as good as the best (or the final promotion settles it), so
    it becomes current and best; anything else (no significant gain, a regressed item, an
    untested candidate) is a reject."""
    accepted = decision.accepted
    return GateOutcome(
        action=GateAction.ACCEPT_NEW_BEST if accepted else GateAction.REJECT,
        becomes_current=accepted,
        becomes_best=accepted,
        decision=decision,
    )
