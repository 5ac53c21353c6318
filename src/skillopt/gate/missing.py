"""Whether a decision stands whatever its missing samples would have scored.

A sample still missing after it was drawn again (:mod:`.sampling`) has a value nobody saw,
but not an unknowable one: a gate score lies in [0, 1]. So a decision that nothing later
reads task by task (the night's final check, ``adopt --edit``, a restore, the trainer's
step) is computed twice, once with every missing sample at its worst for the candidate
(baseline 1, candidate 0) and once at its best (baseline 0, candidate 1). When both give
the same action, that is the decision: no value the missing samples could have had would
move it. When they differ, the decision is ``untested``, as before.

Every verdict of the paired test moves one way as a paired delta rises (the gain's p, the
mean, each task's own regression p) except one: a task that went down joins the count the
per-task regression test is corrected over (Bonferroni). So the worst bound judges
regressions on the worst fill's deltas with the smallest count any fill gives (the best
fill's), and the best bound on the best fill's deltas with the largest count (the worst
fill's): every fill's verdict lies between the two bounds.

Decisions whose per-task outcome a later check reads (a single's gains promise tasks to its
union; a union's losses send it to attribution) keep the plain rule: a missing sample leaves
them ``untested``, so no later check is skipped for want of it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence

from skillopt.gate.paired import PairedTest, paired_test, regressed_tasks

__all__ = ["Bounds", "bounds"]

LOW, HIGH = 0.0, 1.0
"""The range of a gate score: hard is 0 or 1, soft a fraction, mixed a blend of both."""


@dataclasses.dataclass(frozen=True, slots=True)
class Bounds:
    """The paired test with every missing sample at its worst for the candidate, and at its
    best; ``changed`` says whether some pair with both samples drawn differs (then no fill
    can make the candidate look untested)."""

    worst: PairedTest
    best: PairedTest
    changed: bool


def bounds(
    baseline: Mapping[str, Sequence[float]],
    candidate: Mapping[str, Sequence[float]],
    *,
    task_ids: Collection[str],
    confidence: float,
    min_delta: float,
    confirm_from: Mapping[str, int] | None = None,
) -> Bounds | None:
    """The two bounds; None when a drawn score lies outside [0, 1] (a scorer with another
    range: no bound is known, so the decision stays ``untested``)."""
    drawn = [v for t in task_ids for v in (*baseline.get(t, ()), *candidate.get(t, ()))]
    if any(math.isfinite(v) and not LOW <= v <= HIGH for v in drawn):
        return None

    def test(favour_candidate: bool) -> PairedTest:
        base, cand = _filled(baseline, candidate, task_ids, favour_candidate)
        return paired_test(base, cand, confidence=confidence, min_delta=min_delta,
                           task_ids=task_ids, confirm_from=confirm_from)  # fmt: skip

    worst, best = test(False), test(True)
    lower_worst = sum(t.mean_delta < 0 for t in worst.tasks)
    lower_best = sum(t.mean_delta < 0 for t in best.tasks)
    alpha = 1.0 - confidence
    return Bounds(
        worst=dataclasses.replace(
            worst, regressed=regressed_tasks(worst.tasks, alpha, lower=lower_best)
        ),
        best=dataclasses.replace(
            best, regressed=regressed_tasks(best.tasks, alpha, lower=lower_worst)
        ),
        changed=_changed(baseline, candidate, task_ids),
    )


def _filled(
    baseline: Mapping[str, Sequence[float]],
    candidate: Mapping[str, Sequence[float]],
    task_ids: Collection[str],
    favour_candidate: bool,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Both arms with each missing sample (not finite, or absent where the other arm has
    one) set to the bound that favours or disfavours the candidate."""
    fill_base, fill_cand = (LOW, HIGH) if favour_candidate else (HIGH, LOW)
    base_out: dict[str, list[float]] = {}
    cand_out: dict[str, list[float]] = {}
    for t in task_ids:
        base, cand = list(baseline.get(t, ())), list(candidate.get(t, ()))
        if not base and not cand:
            continue
        n = max(len(base), len(cand))
        base_out[t] = [_or(base, k, fill_base) for k in range(n)]
        cand_out[t] = [_or(cand, k, fill_cand) for k in range(n)]
    return base_out, cand_out


def _or(values: Sequence[float], k: int, fill: float) -> float:
    return values[k] if k < len(values) and math.isfinite(values[k]) else fill


def _changed(
    baseline: Mapping[str, Sequence[float]],
    candidate: Mapping[str, Sequence[float]],
    task_ids: Collection[str],
) -> bool:
    for t in task_ids:
        for b, c in zip(baseline.get(t, ()), candidate.get(t, ()), strict=False):
            if math.isfinite(b) and math.isfinite(c) and abs(c - b) > 1e-9:
                return True
    return False
