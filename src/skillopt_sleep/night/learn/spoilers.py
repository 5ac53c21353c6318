"""Spoilers: which accepted edits cancel what other edits do, and are dropped for it.

Two tests, both leave-one-out attributions (:func:`skillopt.gate.attribute`) on samples of
their own:

- :func:`attribution`: a union that failed the gate or lost a task a single improved; each
  removal judged on the lost tasks the edits left in promised.
- :func:`unmask`: before the union, each accepted single left out of a bundle that also
  holds the promising singles (a gain too small to keep them alone), on the tasks those
  improved: a rule that wins its own test by lenient credit while cancelling what the
  others do would otherwise be kept alone and hide them from every later test.

Both judge a removal by what passes (:func:`skillopt.gate.decide_on_passes`; its
:func:`~skillopt.gate.pass_scores` says why), not by the gate's metric.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from skillopt.gate import (
    GateConfig,
    attribute,
    cancelled_tasks,
    decide_on_passes,
)
from skillopt.types import EditRecord, GateAction, GateDecision
from skillopt.types import TaskRecord as Task
from skillopt_sleep.night.learn.candidate import Candidate
from skillopt_sleep.night.learn.pairs import apply_to, compare
from skillopt_sleep.night.learn.samples import Measured
from skillopt_sleep.night.learn.trials import Trial, harm_key
from skillopt_sleep.replay import Docs

if TYPE_CHECKING:
    from skillopt_sleep.night.learn.measure import Measure

__all__ = [
    "MASK",
    "MAX_RIDERS",
    "Gains",
    "attribution",
    "promising",
    "riders",
    "unmask",
]

MASK = 7000
"""First sample id of the masking test (:func:`unmask`): the accepted singles left out one
by one from a bundle that holds the promising singles too."""
MAX_RIDERS = 6
"""The most promising singles (the largest measured gains first) a masking test carries."""

Gains = dict[EditRecord, dict[str, float]]
"""Per edit (as the union tries it), the tasks its accepted single improved, by how much."""


def riders(
    singles: Sequence[tuple[Candidate, Trial, Docs]],
) -> list[tuple[Candidate, Trial, Docs]]:
    """The promising singles (:func:`promising`), the largest measured gain first, at most
    :data:`MAX_RIDERS`: what the masking test (:func:`unmask`) carries."""

    def gain(single: tuple[Candidate, Trial, Docs]) -> float:
        decision = single[1].decision
        return float(decision.arithmetic.get("mean_delta", 0.0)) if decision else 0.0

    shown = [s for s in singles if promising(s[1].decision)]
    return sorted(shown, key=gain, reverse=True)[:MAX_RIDERS]


def promising(decision: GateDecision | None) -> bool:
    """A single that was not accepted but measured a gain with no task found worse: too
    little evidence to keep it, enough to ask whether an accepted edit masks it."""
    if decision is None or decision.accepted or decision.action is GateAction.UNTESTED:
        return False
    arithmetic = decision.arithmetic
    return (
        float(arithmetic.get("mean_delta", 0.0)) > 0
        and bool(arithmetic.get("improved_ids"))
        and not arithmetic.get("regressed_ids")
        and not arithmetic.get("leaks")
    )


async def unmask(
    measure: Measure,
    label: str,
    tasks: Sequence[Task],
    start: Docs,
    edits: list[EditRecord],
    riders: Sequence[tuple[Candidate, Trial, Docs]],
    gains: Gains,
    first_id: int,
) -> list[EditRecord]:
    """``edits`` (the accepted singles) without those that mask the promising singles.

    A rule can win its own test and still cancel what other rules do (every answer made
    a near-miss that a lenient judge still credits): adopted, it hides the others' gains,
    and no later test of theirs can move a task again. Its single cannot show this, nor
    can the union when it is the only edit accepted. So each accepted edit is left out of
    a bundle that also holds the promising singles (gains too small to keep them alone),
    on the tasks those singles improved, on samples of its own (:data:`MASK`); an edit
    whose removal makes those tasks significantly better (Bonferroni-corrected, as in
    any attribution) is dropped before the union. The promising singles are never kept by
    this: they only show what an accepted edit would hide."""
    rider_edits = [c.edit for c, _, _ in riders if c.edit not in edits]
    if not rider_edits or not edits:
        return edits
    bundle = [*edits, *rider_edits]
    promised_by = [gains.get(e, {}) for e in bundle]
    shown = sorted({t for g in promised_by[len(edits) :] for t in g})
    if not shown:
        return edits
    whole = apply_to(start, bundle)[0]
    drop = await attribution(
        measure, tasks, whole, edits, start, label, shown, first_id + MASK,
        promised_by=promised_by, riders=rider_edits, label="mask",
    )  # fmt: skip
    return [e for e in edits if e not in drop]


def _certainly_better(whole: Measured, without: Measured) -> bool:
    """Every pair answered; on no task is ``without`` below ``whole``; on one it is above."""
    better = False
    for t, after in without.scores.items():
        before = whole.scores.get(t, ())
        if not before or len(before) != len(after):
            return False
        for u, w in zip(before, after, strict=True):
            if not (math.isfinite(u) and math.isfinite(w)) or w < u:
                return False
            better = better or w > u
    return better


async def attribution(
    measure: Measure,
    tasks: Sequence[Task],
    union: Docs,
    chosen: list[EditRecord],
    start: Docs,
    target: str,
    task_ids: Sequence[str],
    union_from: int,
    *,
    promised_by: Sequence[Mapping[str, float]] | None = None,
    riders: Sequence[EditRecord] = (),
    label: str = "leave_one_out",
    suspect: int | None = None,
) -> set[EditRecord]:
    """The edits whose removal makes ``task_ids`` significantly better
    (:func:`skillopt.gate.attribute`: one by one, or by halves when there are many), on
    samples from ``union_from`` (:data:`ATTRIBUTE`): the union's arm is drawn once there
    and shared by every removal tested. ``promised_by`` (per edit, the tasks its single
    improved; given when ``task_ids`` are the union's lost tasks): each removal is judged
    on the lost tasks the edits still in the union promised
    (:func:`skillopt.gate.cancelled_tasks`), not on the removed edit's own gains.
    ``riders``: edits in ``union`` that are never left out (:func:`unmask`). ``suspect``
    (the round): when no removal is significant, drop the likeliest spoiler (:func:`_suspect`).
    A removal is decided on what passes (:func:`_on_passes`; the module docstring says why)."""

    def on(left_out: tuple[int, ...]) -> list[Task]:
        ids = set(task_ids if promised_by is None else
                  cancelled_tasks(left_out, task_ids, promised_by))  # fmt: skip
        return [t for t in tasks if t.id in ids]

    async def without(rest: Sequence[EditRecord]) -> Docs:
        return apply_to(start, [*rest, *riders])[0]

    async def better(
        whole: Docs, docs: Docs, cfg: GateConfig, left_out: tuple[int, ...]
    ) -> GateDecision | None:
        on_tasks = on(left_out)
        if not on_tasks:  # it cancelled nothing another edit promised
            return None
        u, w = await compare(measure, on_tasks, whole, docs, phase="attribution", offset=union_from)
        d = _on_passes(u, w, cfg, [t.id for t in on_tasks])
        if not d.accepted and measure.noise.consistent_tonight and _certainly_better(u, w):
            # a model that answers the same every time: one pair is the answer, and a
            # test over repeats of it would only count the same answer again
            note = "certain: consistent model; better on a task, worse on none"
            d = dataclasses.replace(
                d, accepted=True, action=GateAction.ACCEPT_NEW_BEST,
                arithmetic={**d.arithmetic, "certain": note},
            )  # fmt: skip
        return d

    found = await attribute(union, chosen, build=without, compare=better, config=measure.gate)
    suspected = None if suspect is None or found.dropped else _suspect(found.tests, measure.gate)
    _record_attribution(measure, target, chosen, found.tests, label=label, riders=len(riders),
                        suspected=suspected)  # fmt: skip
    caught = None if suspected is None else (chosen[suspected], suspect or 0)
    return _drop(measure, f"{label}.{target}", [chosen[i] for i in found.dropped], caught)


def _drop(
    measure: Measure,
    trial: str,
    significant: Sequence[EditRecord],
    suspected: tuple[EditRecord, int] | None,
) -> set[EditRecord]:
    """What an attribution (``trial``: its name) drops: the edits whose removal was
    significant, not tried again tonight; and the likeliest spoiler when none was
    (``suspected``: it and the round), not tried again that round and, suspected a second
    time tonight, not at all."""
    dropped = set(significant)
    for edit in dropped:  # not tried again tonight: its single would pass as it did
        measure.findings.spoilers.setdefault(harm_key(edit), trial)
    if suspected is not None:
        edit, round_no = suspected
        dropped.add(edit)
        rounds = measure.findings.suspects.setdefault(harm_key(edit), [])
        rounds.append(round_no)
        if len(rounds) >= SUSPECTED_TWICE:  # once may be chance: a later round tries it again
            measure.findings.spoilers.setdefault(harm_key(edit), trial)
    return dropped


SUSPECTED = (
    "dropped as the likeliest spoiler: no removal was significantly better, and without it "
    "the lost tasks gained most"
)
"""The note of the removal :func:`_suspect` chose."""
SUSPECTED_TWICE = 2
"""Times a rule is dropped as the likeliest spoiler before it is not tried again tonight
(as a rule an attribution found significant is after once): a good rule suspected once by
chance keeps its later chances."""


def _suspect(tests: Sequence[tuple[tuple[int, ...], GateDecision]], gate: GateConfig) -> int | None:
    """The edit to drop from a union that lost tasks its singles improved when no removal
    was significantly better (a noisy model; few pairs per lost task): the one whose
    removal gained most on those tasks, if that gain would pass at twice ``gate``'s alpha
    uncorrected (``p_improve <= 2 * alpha``: a removal that gained by chance as often as
    not is no suspect), with every sample answered.

    A union is kept only if it keeps what its edits gained alone. Left as a whole, a rule
    that cancels the others' gains (its own gain a lenient judge's credit) stays in for
    want of power, and the final check, on the same lenient credit, passes it. Dropping
    the likeliest culprit never adds a rule; what is left is measured again on samples of
    its own before anything is kept, and a good rule dropped by chance is tried again when
    a later round proposes it (until :data:`SUSPECTED_TWICE`)."""
    alpha = 1.0 - gate.confidence
    best: tuple[float, int] | None = None
    for group, d in tests:
        a = d.arithmetic
        if len(group) != 1 or a.get("missing_samples"):
            continue
        gain, p = float(a.get("mean_delta", 0.0)), a.get("p_improve")
        if gain <= 0 or p is None or float(p) > 2 * alpha:
            continue
        if best is None or gain > best[0]:
            best = (gain, group[0])
    return None if best is None else best[1]


def _record_attribution(
    measure: Measure,
    target: str,
    chosen: Sequence[EditRecord],
    tests: Sequence[tuple[tuple[int, ...], GateDecision]],
    *,
    label: str,
    riders: int,
    suspected: int | None = None,
) -> None:
    """One trial per removal an attribution tested, with what it decided."""
    for group, d in tests:
        edits = [chosen[i] for i in group]
        if len(edits) > 1:
            note = (
                f"without these {len(edits)} the tasks the singles improved are significantly "
                "better: searched further" if d.accepted
                else f"kept: removing these {len(edits)} does not make those tasks better"
            )  # fmt: skip
        elif d.accepted:
            note = "without it the tasks the singles improved are significantly better: dropped"
        elif group == (suspected,):
            note = SUSPECTED
        else:
            note = "kept: removing it does not make the tasks the singles improved better"
        if riders:
            note = f"with the {riders} promising single(s) in place: {note}"
        measure.findings.trials.append(
            Trial(name=f"{label}.{target}", kind="leave_one_out", round=0,
                  target=target, edits=edits, applied=edits, unmatched=[], decision=d,
                  note=note)
        )  # fmt: skip


def _on_passes(whole: Measured, without: Measured, cfg: GateConfig, ids: list[str]) -> GateDecision:
    """Is ``without`` significantly better than ``whole`` on ``ids``, counting passes?"""
    return decide_on_passes(
        whole.scores, whole.results, without.scores, without.results, config=cfg,
        task_ids=ids, confirm_from=without.confirm_from,
    )  # fmt: skip
