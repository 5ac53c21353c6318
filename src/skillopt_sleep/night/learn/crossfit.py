"""Cross-fitted learning for one target document (skill or memory) in one round.

A walk through one step (:func:`learn_step`):

1. **Folds.** The night's learnable tasks are dealt into folds (:mod:`.folds`,
   reshuffled every night). Every task is held-out evidence for exactly one
   fold's edits.
2. **Reflect per fold** (concurrently): the reflection for fold ``f`` sees only the rollouts
   of the *other* folds. Each edit it proposes becomes a :class:`Candidate` that remembers
   which tasks its reflection saw (``seen``) and where it may be validated (``held_out``).
   Edits carried from earlier nights join with their own ``seen`` sets. A rule an earlier
   round's reflection proposed too is validated on every task one of them did not see
   (:func:`_widen`).
3. **Singles** (concurrently): every candidate alone on top of the current best documents,
   measured on its held-out tasks and paired per task and sample with the baseline
   (:func:`compare`, adaptive sampling), decided by :func:`skillopt.gate.decide_paired`:
   accepted, rejected (a held-out task regressed, or no significant gain) or *untested*
   (no held-out task moved: carried to a later night, not rejected as a tie). An edit
   that two singles already found significantly worse tonight (for either document) is
   rejected again without a test (:data:`HARMFUL_EARLIER`): reflections re-propose an
   over-eager rule round after round, and its test could only reject it again. One such
   verdict is not enough: under a noisy model a good edit is found worse by chance at the
   gate's alpha, and it keeps its later chances.
4. **Union.** The accepted singles together (an edit several folds proposed counts once),
   measured on every learnable task. The union must pass the gate, keep every task its
   singles improved and regress none; when it fails the gate or lost such a task (on any
   model, noisy or not), its edits are attributed on the tasks the singles improved
   (where a spoiler shows: leave-one-out for a few edits, by halves for many), the edits
   whose removal makes those tasks significantly better are dropped (on a model not found
   consistent, when none is, the likeliest one: :func:`.spoilers.attribution`'s
   ``suspect``) and the rest is measured again on unseen samples, and failing that only
   the strongest single edit is kept. This is what stops a harmful generalisation that
   only shows once good edits are in place (it passes alone by luck where nothing passes
   yet, then breaks the union, or breaks nothing and cancels what the others fixed).

The union's all-task measurement is the next step's baseline. No edit is ever accepted on
a task its reflection saw: the leak check is part of every single decision. Every decision
of the chain (single, union, attribution, the union without its spoilers, the strongest
single, the final check, ``adopt --edit``) draws its samples from a range of sample ids of
its own (:data:`FRESH` ... :data:`ADOPT`), so none is made on samples an earlier decision
was chosen by.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skillopt.concurrency import gather_indexed
from skillopt.gate import (
    GateConfig,
    decide_paired,
    lost_gains,
    next_samples,
    promised_gains,
)
from skillopt.types import EditRecord, EditTarget, GateAction, GateDecision, RolloutResult
from skillopt.types import TaskRecord as Task
from skillopt_sleep.night.learn.budget_plan import NOT_TRIED, SinglesBudget, by_value
from skillopt_sleep.night.learn.candidate import Candidate
from skillopt_sleep.night.learn.pairs import apply_to, clear_pass, compare
from skillopt_sleep.night.learn.samples import Measured, finite_mean
from skillopt_sleep.night.learn.spoilers import MASK, Gains, attribution, riders, unmask
from skillopt_sleep.night.learn.trials import (
    HARMFUL_EARLIER,
    SPOILED_EARLIER,
    SUSPECTED_EARLIER,
    Trial,
    Verdict,
    harm_key,
)
from skillopt_sleep.reflect import ReflectOutcome
from skillopt_sleep.replay import Docs

if TYPE_CHECKING:
    from skillopt_sleep.night.learn.measure import Findings, Measure

__all__ = [
    "ADOPT",
    "ATTRIBUTE",
    "BAND",
    "FINAL",
    "FRESH",
    "INERT_ON_KEPT",
    "MASK",
    "RETEST",
    "ROUND",
    "SINGLE_AGAIN",
    "Candidate",
    "Standing",
    "StepResult",
    "Trial",
    "apply_to",
    "clear_pass",
    "compare",
    "learn_step",
    "merge_same",
    "next_samples",
]


@dataclass(kw_only=True)
class StepResult:
    """What one target step produced."""

    best: Docs
    measured: Measured  # the best documents on every learnable task
    accepted: list[EditRecord] = field(default_factory=list)  # every edit kept so far
    rejected: list[EditRecord] = field(default_factory=list)
    untested: list[Candidate] = field(default_factory=list)
    proposed: list[EditRecord] = field(default_factory=list)
    gains: dict[EditRecord, dict[str, float]] = field(default_factory=dict)  # of ``accepted``


@dataclass(frozen=True, kw_only=True)
class Standing:
    """What a step's union holds and measures against: the night's live documents
    (``start``) and the edits kept so far tonight, with the gains their singles showed.

    A kept rule that cancels what later rules do (every answer made a near-miss a lenient
    judge still credits) stands under each later single and hides its gain: such a single
    moves no task (on a noisy model: shows no significant gain, :func:`_may_hide_a_gain`).
    So such a single, while tonight kept edits, is measured again against the live
    documents, where its gain shows; and the step's union holds
    every kept edit with the new ones, against the live documents, so it loses that gain
    and its attribution finds the rule that cancels it."""

    start: Docs
    kept: tuple[EditRecord, ...] = ()
    gains: Mapping[EditRecord, Mapping[str, float]] = field(default_factory=dict)


HARMFUL_TWICE = 2  # significantly-worse verdicts after which a rule is not tested again


def found_harmful(decision: GateDecision | None) -> bool:
    """A single's decision that rejected its edit as significantly worse on the whole
    (not a lone regression beside a gain, nor a gain too small to show)."""
    if decision is None or decision.accepted or decision.action is GateAction.UNTESTED:
        return False
    arithmetic = decision.arithmetic
    return bool(arithmetic.get("harmful")) and float(arithmetic.get("mean_delta", 0.0)) < 0


FRESH = 1000
"""First sample id of the union's measurement: samples nobody has looked at yet."""
RETEST = 2000
"""First sample id of the union without its spoilers, after choices made on the
:data:`FRESH` and :data:`ATTRIBUTE` samples."""
ATTRIBUTE = 3000
"""First sample id of the attribution of a union: both arms (the union and the union
without an edit) drawn anew, since the union's own samples chose to attribute it."""
SINGLE_AGAIN = 4000
"""First sample id of the strongest single measured again when no combination passed."""
FINAL = 5000
"""First sample id of the night's final check: both arms drawn anew, never the samples of
the step (a round's union) whose documents it checks."""
ADOPT = 6000
"""First sample id of ``adopt --edit``'s check of a subset of a night's edits, apart from
every sample the night decided on."""
BAND = 500
"""The second target step of a round draws its union, attribution, masking and retest
samples this far into each of those ranges: none of its decisions reads the samples the
first step's decisions were made on."""
ROUND = 10_000
"""Sample ids of round ``r`` start at ``(r - 1) * ROUND``: a round that tries again on the
documents an earlier round already measured draws new samples instead of reading back the
earlier round's answers (the replayer keeps every answer by task, documents and sample)."""


# --------------------------------------------------------------------------- one step


@dataclass(frozen=True, slots=True, kw_only=True)
class _Fold:
    index: int
    held_out: tuple[Task, ...]
    seen: tuple[Task, ...]


def _failing(tasks: Sequence[Task], measured: Measured) -> list[str]:
    return [t.id for t in tasks if finite_mean(measured.scores.get(t.id, ())) < 1.0]


async def learn_step(
    measure: Measure,
    *,
    round_no: int,
    targets: Sequence[EditTarget],
    tasks: Sequence[Task],
    best: Docs,
    base: Measured,
    folds: Sequence[Sequence[Task]],
    carried: Sequence[Candidate] = (),
    first_id: int = 0,
    standing: Standing | None = None,
    band: int = 0,
) -> StepResult:
    """Reflect per fold for each target (on ``base``, the rollouts under ``best``), gate each
    edit alone on its fold on ``best`` (against the live documents where it shows no gain
    there, :class:`Standing`), then one union of the accepted singles and the edits kept
    so far, against the live documents. Singles draw sample ids from ``first_id``, the
    union and what follows it from ``first_id + band`` onwards (a second step of the same
    round takes another ``band``, so its decisions are on samples of their own)."""
    standing = standing or Standing(start=best)
    step = StepResult(best=best, measured=base, accepted=list(standing.kept))
    parts = [
        _Fold(
            index=i,
            held_out=tuple(fold),
            seen=tuple(t for j, other in enumerate(folds) if j != i for t in other),
        )
        for i, fold in enumerate(folds)
    ]
    merged = await _propose(measure, round_no, targets, parts, carried, tasks, (best, base))
    step.proposed = list(dict.fromkeys(c.edit for c in merged))
    by_id = {t.id: t for t in tasks}
    singles: list[tuple[Candidate, Trial, Docs]] = []
    for target in targets:
        candidates = [c for c in merged if c.edit.target is target]
        if not candidates:
            continue
        if measure.noise.tight_budget:

            def failing(c: Candidate) -> int:
                ids = c.motivated_from or c.seen
                return len(_failing([by_id[t] for t in ids if t in by_id], base))

            candidates = by_value(candidates, failing, tried=measure.findings.trials)
        singles.extend(await _singles(
            measure, round_no, target, (standing, best), base, candidates, by_id, first_id
        ))  # fmt: skip
    passed = _sort_singles(singles, step)
    shown = riders(singles) if measure.gate.mode == "strict" else []
    if passed or (standing.kept and shown):
        label = targets[0].value if len(targets) == 1 else "both"
        await _union(measure, round_no, label, tasks, standing, passed, step, first_id + band,
                     shown)  # fmt: skip
    _account(step, passed)
    return step


def _account(step: StepResult, passed: Sequence[tuple[Candidate, Trial, Docs]]) -> None:
    """Every proposal of a kept rule counts as kept; the other accepted singles as rejected."""
    kept = {harm_key(e) for e in step.accepted}
    step.accepted.extend(c.edit for c, _, _ in passed if harm_key(c.edit) in kept)
    step.accepted = list(dict.fromkeys(step.accepted))
    accepted = set(step.accepted)
    step.rejected.extend(c.edit for c, _, _ in passed if c.edit not in accepted)
    step.rejected = list(dict.fromkeys(e for e in step.rejected if e not in accepted))
    step.untested = [c for c in step.untested if c.edit not in accepted]


async def _propose(
    measure: Measure, round_no: int, targets: Sequence[EditTarget], parts: Sequence[_Fold],
    carried: Sequence[Candidate], tasks: Sequence[Task], on: tuple[Docs, Measured],
) -> list[Candidate]:  # fmt: skip
    """Every target's reflections per fold (``on``: the documents and their rollouts) and
    the edits carried from earlier nights, one candidate per rule (a rule proposed for
    both documents is the first target's)."""
    best, base = on
    proposed: list[Candidate] = []
    for target in targets:
        proposed.extend(await _reflect_folds(measure, round_no, target, best, base, parts))
        for c in carried:
            if c.edit.target is target:
                held = tuple(t.id for t in tasks if t.id not in c.seen)
                proposed.append(Candidate(edit=c.edit, fold=-1, seen=c.seen, held_out=held,
                                          carried_nights=c.carried_nights, why=c.why))  # fmt: skip
    order = [t.id for t in tasks]
    merged = [_widen(c, measure.findings.seen_by, order) for c in merge_same(proposed, order)]
    measure.proposed(round_no, len(merged))
    return merged


def _widen(
    cand: Candidate, seen_by: dict[tuple[str, str, str], frozenset[str]], order: Sequence[str]
) -> Candidate:
    """``cand`` validated on every task that one of tonight's reflections proposing its rule
    did not see, in this round or an earlier one; ``seen_by`` (per rule, what all of them
    saw) learns this proposal.

    Each reflection that proposed the rule without seeing a task is a leak-free derivation
    of it for that task (as in :func:`merge_same`). Folds are dealt anew every round, so a
    rule proposed again in a later round carries the evidence of every fold it was held
    out from: a rule that helps the two or three tasks of its kind a fold holds can never
    pass a test on one fold alone when each task is one observation (a model that answers
    the same every time), and would otherwise be proposed, and lost, round after round."""
    key = harm_key(cand.edit)
    seen = cand.seen & seen_by.get(key, cand.seen)
    seen_by[key] = seen
    if seen == cand.seen:
        return cand
    held = [t for t in order if t not in seen]
    return dataclasses.replace(cand, seen=seen, held_out=tuple(held),
                               motivated_from=cand.motivated_from or cand.seen)  # fmt: skip


def _sort_singles(
    singles: Sequence[tuple[Candidate, Trial, Docs]], step: StepResult
) -> list[tuple[Candidate, Trial, Docs]]:
    """The accepted singles; the rejected and untested ones noted in ``step``."""
    passed: list[tuple[Candidate, Trial, Docs]] = []
    for cand, trial, docs in singles:
        verdict = trial.verdict
        if verdict is Verdict.ACCEPTED:
            passed.append((cand, trial, docs))
        elif verdict is Verdict.REJECTED:  # its test, or two earlier ones (HARMFUL_EARLIER)
            step.rejected.append(cand.edit)
        elif verdict is Verdict.UNTESTED or (trial.decision is None and trial.applied):
            step.untested.append(cand)  # nothing held out could exercise it tonight
    return passed


def merge_same(candidates: Sequence[Candidate], order: Sequence[str]) -> list[Candidate]:
    """One candidate per distinct edit, validated on every task that at least one of the
    reflections proposing it did not see.

    When the reflections of several folds propose the same edit, each of them is a
    leak-free derivation of it for the tasks it did not see, so the edit's held-out
    evidence is the union of their held-out tasks (its ``seen`` is what all of them saw).
    One test on more tasks instead of one test per fold: more power for an edit several
    folds agree on, and fewer chances for a useless edit to pass a test by luck.
    """
    groups: dict[tuple[str, str, str], list[Candidate]] = {}
    for cand in candidates:
        groups.setdefault(harm_key(cand.edit), []).append(cand)
    merged: list[Candidate] = []
    for group in groups.values():
        first = group[0]
        if len(group) == 1:
            merged.append(first)
            continue
        seen = frozenset.intersection(*(c.seen for c in group))
        held = {t for c in group for t in c.held_out} - seen
        merged.append(
            dataclasses.replace(
                first,
                seen=seen,
                held_out=tuple(t for t in order if t in held),
                carried_nights=max(c.carried_nights for c in group),
                motivated_from=frozenset().union(*(c.motivated_from or c.seen for c in group)),
                why=next((c.why for c in group if c.why), ""),
            )
        )
    return merged


async def _reflect_folds(
    measure: Measure,
    round_no: int,
    target: EditTarget,
    best: Docs,
    base: Measured,
    parts: Sequence[_Fold],
) -> list[Candidate]:
    name = f"round{round_no}.reflect_{target.value}"
    measure.begin(name)

    async def one(i: int) -> ReflectOutcome:
        part = parts[i]
        key = f"r{round_no}.{target.value}.f{part.index}"
        return await measure.reflect(key, target, best, base.rollout_sets(part.seen))

    outcomes = await gather_indexed(one, len(parts))
    candidates: list[Candidate] = []
    for part, outcome in zip(parts, outcomes, strict=True):
        seen = frozenset(t.id for t in part.seen)
        held = tuple(t.id for t in part.held_out)
        candidates.extend(
            Candidate(edit=e, fold=part.index, seen=seen, held_out=held) for e in outcome.edits
        )
    measure.end(name, edits=len(candidates), folds=len(parts))
    measure.check_budget(name)
    measure.check_reflections(name, outcomes)
    return candidates


async def _singles(
    measure: Measure,
    round_no: int,
    target: EditTarget,
    on: tuple[Standing, Docs],
    base: Measured,
    candidates: Sequence[Candidate],
    by_id: Mapping[str, Task],
    first_id: int,
) -> list[tuple[Candidate, Trial, Docs]]:
    """Each candidate alone on the best documents so far (``on``'s second); one that moves
    no task there, against the live documents (:class:`Standing`)."""
    name = f"round{round_no}.trial_{target.value}"
    measure.begin(name)
    results: list[RolloutResult] = []
    motivated = [_failing([by_id[t] for t in sorted(c.motivated_from or c.seen) if t in by_id],
                          base) for c in candidates]  # fmt: skip
    budget = (
        SinglesBudget(measure.budget, samples=measure.gate.samples_per_task, n_tasks=len(by_id))
        if measure.noise.tight_budget else None
    )  # fmt: skip
    standing, best = on

    async def test(cand: Candidate, held: list[Task], ref: Docs, docs: Docs) -> GateDecision:
        before = measure.spend.calls
        b, c = await compare(measure, held, ref, docs, phase="trial",
                             plan=clear_pass(measure.gate), offset=first_id)  # fmt: skip
        if budget is not None:
            budget.ran(len(held), measure.spend.calls - before)
        results.extend(c.results)
        return decide_paired(b.scores, c.scores, config=measure.gate,
                             task_ids=[t.id for t in held], seen=cand.seen,
                             confirm_from=c.confirm_from)  # fmt: skip

    async def one(i: int) -> tuple[Candidate, Trial, Docs]:
        cand = candidates[i]
        docs, app = apply_to(best, [cand.edit])
        trial = _single_trial(name, round_no, target, cand, app, motivated[i])
        held = [by_id[t] for t in cand.held_out if t in by_id]
        found = measure.findings
        trial.note = _untried(found, round_no, cand, held, budget) if (
            app.applied) else (
            "the edit did not change the document"
        )  # fmt: skip
        if not trial.note:
            trial.note = cand.why
            trial.decision = await test(cand, held, best, docs)
            hidden = _may_hide_a_gain(trial.decision, measure.noise.consistent_tonight)
            live = _on_live(standing, cand.edit) if hidden else None
            if live is not None:  # a kept edit may hide its gain: against the live documents
                trial.decision, docs = await test(cand, held, standing.start, live), live
                trial.note = "; ".join(n for n in (trial.note, INERT_ON_KEPT) if n)
        return cand, trial, docs

    if budget is None:
        out = await gather_indexed(one, len(candidates))
    else:  # one after another, best first, while the budget covers them
        out = [await one(i) for i in range(len(candidates))]
    _record_singles(measure, name, out, results)
    return out


def _record_singles(
    measure: Measure,
    name: str,
    out: Sequence[tuple[Candidate, Trial, Docs]],
    results: Sequence[RolloutResult],
) -> None:
    """The singles' trials and the rules found worse, once every single of the stage ran
    (they ran side by side: none of them could skip another's test)."""
    measure.findings.trials.extend(t for _, t, _ in out)
    for cand, trial, _ in out:
        if found_harmful(trial.decision):
            measure.findings.harmful_edits.setdefault(harm_key(cand.edit), []).append(trial.name)
    measure.check_degenerate(name, results, candidate=True)
    accepted = sum(t.verdict is Verdict.ACCEPTED for _, t, _ in out)
    measure.end(name, singles=len(out), accepted=accepted)
    measure.check_budget(name)


INERT_ON_KEPT = (
    "it showed no gain on top of the edits kept tonight: measured against the live documents"
)
"""A single's note when its decision is the one against the live documents."""


def _may_hide_a_gain(decision: GateDecision | None, consistent: bool | None) -> bool:
    """Whether a single's test on the best documents may have missed a gain a kept edit
    hides (:class:`Standing`), so that it is measured again against the live documents.

    On a model the probe found consistent, a hidden gain shows as exactly nothing: no
    held-out task moved (none of its samples missing). On a noisy model nothing is ever
    exactly still (the noise moves some tasks either way), so the sign there is the test
    finding no significant gain and no harm; one found significantly worse, or missing a
    sample, is not measured again."""
    if decision is None or decision.accepted or decision.arithmetic.get("missing_samples"):
        return False
    if consistent:
        return decision.action is GateAction.UNTESTED
    return not found_harmful(decision)


def _on_live(standing: Standing, edit: EditRecord) -> Docs | None:
    """``edit`` on the live documents, when tonight kept edits and it applies there (it does
    not change a line tonight wrote, nor repeat a rule kept); None otherwise."""
    if not standing.kept or harm_key(edit) in {harm_key(e) for e in standing.kept}:
        return None
    docs, app = apply_to(standing.start, [edit])
    return docs if app.applied else None


def _single_trial(
    name: str, round_no: int, target: EditTarget, cand: Candidate, app: Any, motivated: list[str]
) -> Trial:
    """The trial record of one single, before its test."""
    kind = f".f{cand.fold}" if cand.fold >= 0 else ".watched" if cand.why else ".carried"
    return Trial(
        name=f"{name}{kind}",
        kind="single",
        round=round_no,
        target=target.value,
        edits=[cand.edit],
        applied=list(app.applied),
        unmatched=[*app.unmatched, *app.skipped],
        fold=cand.fold,
        motivated_by=motivated,
        seen=sorted(cand.seen),
        note=cand.why,
    )


def _untried(
    found: Findings,
    round_no: int,
    cand: Candidate,
    held: Sequence[Task],
    budget: SinglesBudget | None,
) -> str:
    """Why a single of round ``round_no`` that changes the document is not tested ("" when
    it is); ``found``: the rules found significantly worse tonight (``harmful_edits``),
    dropped for cancelling other edits' gains (``spoilers``) or suspected of it
    (``suspects``, by round)."""
    key = harm_key(cand.edit)
    if not held:
        return "no task tonight is held out from this edit's reflection"
    if len(found.harmful_edits.get(key, ())) >= HARMFUL_TWICE:
        return HARMFUL_EARLIER
    if key in found.spoilers:
        return SPOILED_EARLIER
    if round_no in found.suspects.get(key, ()):
        return SUSPECTED_EARLIER
    if budget is not None and not budget.affords(len(held)):
        return NOT_TRIED
    return ""


async def _union(
    measure: Measure,
    round_no: int,
    label: str,
    tasks: Sequence[Task],
    standing: Standing,
    passed: list[tuple[Candidate, Trial, Docs]],
    step: StepResult,
    first_id: int,
    riders: Sequence[tuple[Candidate, Trial, Docs]] = (),
) -> None:
    """Measure the edits kept so far and the accepted singles together on every task,
    against the live documents; drop edits that conflict, and first those that mask what
    the promising singles (``riders``) showed."""
    name = f"round{round_no}.union_{label}"
    measure.begin(name)
    ranked = sorted(
        passed, key=lambda p: p[1].decision.delta if p[1].decision else 0.0, reverse=True
    )
    unique: dict[tuple[str, str, str], EditRecord] = {harm_key(e): e for e in standing.kept}
    for cand, _, _ in ranked:  # the same edit proposed by several folds is tried once
        unique.setdefault(harm_key(cand.edit), cand.edit)
    edits = list(unique.values())
    gains = {**_promised([*ranked, *riders]), **standing.gains}
    edits = await unmask(measure, label, tasks, standing.start, edits, riders, gains, first_id)
    kept = [e for e in standing.kept if e in edits]  # what the masking test left of them
    chosen, measured, note = await _settle(
        measure, round_no, label, tasks, standing.start, edits, gains, first_id, kept=kept,
        unmasked=len(kept) == len(standing.kept),
    )  # fmt: skip
    if measured is not None:
        step.best, step.measured = measured.docs, measured
    elif chosen != list(standing.kept):  # the masking test dropped a kept edit
        step.best = apply_to(standing.start, chosen)[0]
    step.accepted = chosen
    step.gains = {e: dict(gains[e]) for e in chosen if e in gains}
    measure.end(name, accepted=len(chosen), proposed=len(edits), note=note)
    measure.check_budget(name)


def _promised(ranked: Sequence[tuple[Candidate, Trial, Docs]]) -> Gains:
    """Per edit (as the union tries it), the tasks its accepted single improved and the
    single's gain on each (the larger, where several folds' singles improved it)."""
    decisions: dict[EditRecord, list[GateDecision | None]] = {}
    for cand, trial, _ in ranked:
        decisions.setdefault(_same_edit(cand.edit, ranked), []).append(trial.decision)
    return {edit: promised_gains(found) for edit, found in decisions.items()}


def _same_edit(edit: EditRecord, ranked: Sequence[tuple[Candidate, Trial, Docs]]) -> EditRecord:
    """The first proposal of ``edit``'s rule among ``ranked`` (the one the union tries)."""
    return next(c.edit for c, _, _ in ranked if harm_key(c.edit) == harm_key(edit))


async def _settle(
    measure: Measure,
    round_no: int,
    label: str,
    tasks: Sequence[Task],
    start: Docs,
    edits: list[EditRecord],
    gains: Gains,
    first_id: int,
    *,
    kept: Sequence[EditRecord] = (),
    unmasked: bool = True,
) -> tuple[list[EditRecord], Measured | None, str]:
    """The union, else the union without the edits that spoil it (:func:`_without_spoilers`,
    measured on :data:`RETEST` samples), else the kept edits (``kept``) with one new single
    (:func:`_fallback`, on :data:`SINGLE_AGAIN` samples); each on fresh samples of every
    task paired with fresh baseline samples, and each must pass the paired gate. When
    nothing passes, the kept edits stand as an earlier union measured them (``unmasked``:
    the masking test dropped none of them, and attribution blamed none), else nothing."""
    attempts: list[tuple[str, list[EditRecord], int]] = [("union", edits, first_id + FRESH)]
    new, tried = [e for e in edits if e not in kept], list[list[EditRecord]]()
    blamed: list[EditRecord] = []  # what attribution dropped: it does not come back here
    lost: set[str] = set()  # the tasks a single improved that a combination lost
    while attempts:
        kind, chosen, offset = attempts.pop(0)
        if kind == "strongest_single":  # chosen when it is measured, on all that was lost
            chosen = _fallback(kept, new, blamed, lost, gains)
        if chosen in tried or not chosen:
            continue
        tried.append(chosen)
        docs, app = apply_to(start, chosen)
        b, c = await compare(measure, tasks, start, docs, phase="union",
                             plan=clear_pass(measure.gate), offset=offset)  # fmt: skip
        promised = _promised_by(chosen, gains)
        conflicts = lost_gains(b.scores, c.scores, promised) if len(chosen) > 1 else []
        lost.update(conflicts)
        trial = _step_trial(measure.gate, round_no, label, tasks, kind, chosen, app, b, c,
                           conflicts)  # fmt: skip
        measure.findings.trials.append(trial)
        decision = trial.decision
        assert decision is not None
        if kind == "union" and len(chosen) > 1 and _attribute(decision, conflicts):
            rest = await _without_spoilers(
                measure, tasks, docs, chosen, (start, label, round_no), promised, conflicts,
                gains, first_id,
            )  # fmt: skip
            if rest is not None:
                blamed.extend(e for e in chosen if e not in rest)
                attempts.insert(0, ("without_conflicting", rest, first_id + RETEST))
                continue
        certain = _loss_certain(b, c, conflicts, bool(measure.noise.consistent_tonight))
        if decision.accepted and conflicts and certain:
            trial.note += "; not kept as a whole: the loss is certain, and no edit was to blame"
        elif decision.accepted:
            return list(app.applied), c, kind
        if kind != "strongest_single" and not any(k == "strongest_single" for k, *_ in attempts):
            attempts.append(("strongest_single", [], first_id + SINGLE_AGAIN))
    return _nothing_passed(kept, unmasked and not any(e in blamed for e in kept))


def _fallback(
    kept: Sequence[EditRecord],
    new: Sequence[EditRecord],
    blamed: Sequence[EditRecord],
    lost: set[str],
    gains: Gains,
) -> list[EditRecord]:
    """The kept edits and one new single, none of them one attribution blamed, first the
    single whose own gains the combinations lost most (then the larger gain alone).

    A spoiler's own single wins on the lenient credit it games, so the largest single
    gain is often the spoiler's, and taking it back as the fallback would keep exactly what
    was found to spoil, or what no removal could pin down. When edits together lose what
    one of them gained alone, that one's gains were real where it stood alone; the edit
    whose gains survive the combination is the likelier cause of the loss."""
    clean = [e for e in new if e not in blamed]
    clean.sort(key=lambda e: -len(lost & set(gains.get(e, {}))))  # stable: gain order on ties
    return [*(e for e in kept if e not in blamed), *clean[:1]]


def _nothing_passed(
    kept: Sequence[EditRecord], stand: bool
) -> tuple[list[EditRecord], Measured | None, str]:
    if kept and stand:
        return list(kept), None, "nothing new passed the paired gate: the kept edits stand"
    return [], None, "no combination passed the paired gate on every task"


async def _without_spoilers(
    measure: Measure,
    tasks: Sequence[Task],
    docs: Docs,
    chosen: list[EditRecord],
    on: tuple[Docs, str, int],
    promised: Mapping[str, float],
    conflicts: list[str],
    gains: Gains,
    first_id: int,
) -> list[EditRecord] | None:
    """``chosen`` without the edits its attribution drops (None: it drops none), judged
    where the union lost what a single gained, or else on every task a single gained;
    ``on``: (the documents the union stands on, the step's label, the round).

    A union of several edits that fails the gate or lost a task a single improved
    (:func:`_attribute`) is attributed (:func:`.spoilers.attribution`) on samples of its own
    (:data:`ATTRIBUTE`: the union's samples chose to attribute, so they cannot also decide
    what to drop); an edit it drops is in none of the step's later attempts."""
    where = conflicts or sorted(promised) or [t.id for t in tasks]
    by = [gains.get(e, {}) for e in chosen] if conflicts else None
    start, label, round_no = on
    suspect = round_no if conflicts and not measure.noise.consistent_tonight else None
    drop = await attribution(measure, tasks, docs, chosen, start, label, where,
                             first_id + ATTRIBUTE, promised_by=by, suspect=suspect)  # fmt: skip
    return [e for e in chosen if e not in drop] if drop else None


def _promised_by(chosen: Sequence[EditRecord], gains: Gains) -> dict[str, float]:
    """The tasks ``chosen``'s singles improved, each with the largest gain one promised."""
    promised: dict[str, float] = {}
    for e in chosen:
        for t, gain in gains.get(e, {}).items():
            promised[t] = max(promised.get(t, 0.0), gain)
    return promised


def _step_trial(
    gate: GateConfig, round_no: int, label: str, tasks: Sequence[Task], kind: str,
    chosen: list[EditRecord], app: Any, b: Measured, c: Measured, conflicts: list[str],
) -> Trial:  # fmt: skip
    """The trial of several edits together (or the strongest single), decided on its
    samples of every task."""
    decision = decide_paired(
        b.scores, c.scores, config=gate, task_ids=[t.id for t in tasks],
        confirm_from=c.confirm_from,
    )  # fmt: skip
    lost = f"lost {len(conflicts)} task(s) a single edit improved: {conflicts[:6]}"
    return Trial(
        name=f"round{round_no}.{kind}_{label}",
        kind="union" if kind == "union" else kind,
        round=round_no,
        target=label,
        edits=chosen,
        applied=list(app.applied),
        unmatched=[*app.unmatched, *app.skipped],
        decision=decision,
        note=lost if conflicts else "",
    )


def _loss_certain(b: Measured, c: Measured, conflicts: Sequence[str], consistent: bool) -> bool:
    """Whether several edits together certainly lost a task a single improved, so that they
    are not kept as a whole when attribution named no one edit to blame (two spoilers
    cover for each other when left out one by one): on a model that answers consistently
    every loss is certain; on a noisy one, a lost task whose every sample under the step
    fell below every baseline sample on four pairs or more (``consistent``: the noise
    probe found tonight's model consistent)."""
    if consistent:
        return True
    for t in conflicts:
        base, cand = b.scores.get(t, ()), c.scores.get(t, ())
        if len(cand) >= 4 and max(cand) < min(base, default=0.0):
            return True
    return False


def _attribute(decision: GateDecision, conflicts: list[str]) -> bool:
    """Whether the union's edits are attributed: where the union fails the gate, or lost a
    task a single improved, on every model. A spoiler that cancels the others' gains breaks
    no task that passed before and lets the union pass on what is left; only the loss of
    a task a single improved shows it, and on a noisy model that loss is no less a sign
    (attribution then decides on samples of its own whether an edit caused it)."""
    return not decision.accepted or bool(conflicts)
