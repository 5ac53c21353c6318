"""The spend estimate said again once the night has measured what it assumed.

The estimate (:mod:`.estimate`) is said before the first learning call. Two of its
assumptions are measured early in the night, and each can move the cost several times over:

- **the model's noise**, once the first rollouts are judged (:func:`revise_on_noise`): a
  model that flips its answers makes a night several times a consistent model's;
- **the edits reflection proposes**, once a round's reflections have answered
  (:func:`revise_on_edits`): most of a night's calls are the gate's (a trial per edit, the
  union, the final check, and their judging), and a round that proposes no edit runs none.

A revision more than 30 % off the figure said last is said again (the progress line and the
notes), recorded as ``estimate_detail.revised`` (the last one said; ``revisions`` lists each
one's figure and when it was said), and its budget warning replaces the one said before: a
warning the revision no longer bears out is taken back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skillopt_sleep.night.course import Estimate
from skillopt_sleep.night.estimate import night_shape
from skillopt_sleep.night.night_state import Night
from skillopt_sleep.stage_rates import (
    JUDGED,
    LEARNING,
    NOISE_SCALE,
    NightRecord,
    predict_calls,
    stage_group,
)
from skillopt_sleep.state import project_dir
from skillopt_sleep.token_model import TokenModel, budget_warning

__all__ = ["SAY_AGAIN", "revise_on_edits", "revise_on_noise"]

SAY_AGAIN = 0.3
"""A revision this far off the figure said last (as a share of it) is said again."""
PER_EDIT = ("trial", "attribution")  # a trial per candidate edit, attributions per union edit
GATE = ("union", "final")  # a union a round, a final check a night, once any edit is tried


def revise_on_noise(night: Night, estimate: Estimate, noise: float) -> None:
    """Once the first rollouts measured tonight's noise (``noise``: the share of tasks whose
    samples disagreed): when the learning ahead is now expected to cost more than 30 % off
    what was said, say it again (``estimate_detail.revised``), with the budget's warning."""
    detail = estimate.detail
    tasks = detail.get("tasks") or {}
    model = TokenModel.load(project_dir(night.cfg.state_path(), night.project))
    learnable = int(tasks.get("learnable", 0))
    shape = night_shape(night.cfg, learnable, float(tasks.get("judged_share", 1.0)))
    predicted = predict_calls(model.nights, kind=LEARNING, tasks=learnable,
                              test=int(tasks.get("test", 0)), sessions=0, noise=noise,
                              shape=shape)  # fmt: skip
    ahead = {s: n for s, n in predicted.calls.items() if s != "mine"}
    said = {s: n for s, n in detail["by_stage"].items() if s != "mine"}
    before, after = sum(said.values()), sum(ahead.values())
    if not before or abs(after - before) <= SAY_AGAIN * before:
        return
    calls = _spent(night).get("mine", 0) + after
    measured = _measured_alike(model.nights, noise)
    detail["revised"] = {
        "calls": calls,
        "by_stage": ahead,
        "after": "the first rollouts",
        "noise": noise,
        "basis": "measured" if measured else "prior",
        "edits_per_reflection": predicted.edits_per_reflection,
    }
    said_before = f"(was {detail['calls']})"
    figure = (
        f"about {calls} model calls in all {said_before}"
        if measured or after < before
        # a prior's noisy night is one world's: say the span, not a figure to plan with
        else f"between {detail['calls']} and {calls} model calls in all: no night this noisy "
        "was measured on this project yet, so the upper figure is a prior"
    )
    line = (
        f"revised estimate after the first rollouts (answers disagreed on {noise:.0%} of the "
        f"tasks): {figure}"
    )
    _say(night, detail, line, calls)


def revise_on_edits(night: Night, estimate: Estimate, round_no: int, edits: int) -> None:
    """Once round ``round_no``'s reflections proposed ``edits`` candidate edits, before any
    was tried: the gate's stages ahead scaled to the edits proposed (none: no trial, union
    or final check), said again when more than 30 % off the figure said last. A night whose
    project skills learn beside it is left as said (their gates are not told here)."""
    detail = estimate.detail
    if detail.get("by_skill") or not (detail.get("tasks") or {}).get("learnable"):
        return
    last: Mapping[str, Any] = detail.get("revised") or detail
    said = {s: int(n) for s, n in last["by_stage"].items() if s != "mine"}
    spent = _spent(night)
    rounds = night.cfg.night.rounds
    more = round_no < rounds and not (edits == 0 and night.noise.seen == 0)
    proposed = sum(night.findings.proposed)
    kept = proposed > edits  # an earlier round's edit may have been kept: its final check
    per_reflection = float(last.get("edits_per_reflection") or 0.0)
    assumed = per_reflection * said.get("reflect", 0) * (_share(round_no, rounds) if more else 1)
    ahead = _ahead(said, spent, more=more, kept=kept, gate=bool(edits) or more,
                   scale=proposed / assumed if assumed else 1.0)  # fmt: skip
    by_stage = {s: n for s in sorted({*said, *spent} - {"mine"})
                if (n := spent.get(s, 0) + ahead.get(s, 0))}  # fmt: skip
    calls = spent.get("mine", 0) + sum(by_stage.values())
    before = int(last["calls"])
    if not before or abs(calls - before) <= SAY_AGAIN * before:
        return
    detail["revised"] = {
        **{k: v for k, v in last.items() if k in ("noise", "basis", "edits_per_reflection")},
        "calls": calls,
        "by_stage": by_stage,
        "after": f"round {round_no}'s reflections",
        "edits": proposed,
    }
    line = f"revised estimate after round {round_no}'s reflections ({_why(edits, kept, more)}"
    line += f"): about {calls} model calls in all (was {before})"
    _say(night, detail, line, calls)


def _why(edits: int, kept: bool, more: bool) -> str:
    """What the revision rests on, in a few words."""
    if edits:
        return f"{edits} candidate edit(s) proposed, the gate's trials scaled to them"
    if kept:
        return "no edit proposed: no trial or union, the final check of edits kept before"
    if more:
        return "no edit proposed: no trial, union or final check this round"
    return "no edit proposed: no trial, union or final check to run"


def _share(round_no: int, rounds: int) -> float:
    """The share of a night's candidate edits its first ``round_no`` rounds propose: fewer
    each round, as what is still failing narrows (the lift night's 6, 4 and 2)."""
    weights = [rounds - k for k in range(rounds)]
    return sum(weights[:round_no]) / sum(weights)


def _ahead(
    said: Mapping[str, int], spent: Mapping[str, int], *, more: bool, kept: bool, gate: bool,
    scale: float,
) -> dict[str, int]:  # fmt: skip
    """The calls each stage is still expected to make, from what was said (``said``) and
    spent (``spent``): the rounds' rollouts and reflections only while rounds are left
    (``more``); the gate only where edits are to be tried (``gate``), its trials scaled to
    the edits proposed as a share of those assumed (``scale``), the final check also for
    the edits an earlier round may have ``kept``; judging in proportion."""
    ahead: dict[str, float] = {}
    for stage, n in said.items():
        whole: float = n
        if stage in ("rollout", "reflect") and not more:
            whole = 0
        elif stage in PER_EDIT:
            whole = n * scale if gate else 0
        elif stage in GATE:
            whole = n if gate or (stage == "final" and kept) else 0
        ahead[stage] = max(0.0, whole - spent.get(stage, 0))
    judged = sum(n for s, n in said.items() if s in JUDGED)
    ahead["judge"] = said.get("judge", 0) / judged * sum(
        n for s, n in ahead.items() if s in JUDGED
    ) if judged else 0.0  # fmt: skip
    return {s: round(n) for s, n in ahead.items() if round(n)}


def _spent(night: Night) -> dict[str, int]:
    """Tonight's calls so far, per stage as the estimate names them."""
    out: dict[str, int] = {}
    for stage, n in night.spend.calls_by_stage.items():
        out[stage_group(stage)] = out.get(stage_group(stage), 0) + n
    return out


def _say(night: Night, detail: dict[str, Any], line: str, calls: int) -> None:
    """Say the revision (``detail["revised"]``), keep it among the night's revisions, and
    replace the budget's warning."""
    detail.setdefault("revisions", []).append({"after": detail["revised"]["after"], "calls": calls})
    night.notes.append(line)
    night.progress.note(line)
    _replace_warning(night, detail, calls)


def _replace_warning(night: Night, detail: dict[str, Any], calls: int) -> None:
    """The budget's word on the revised estimate replaces the one said before it: a
    warning the revision no longer bears out is taken back, a new one said in its place."""
    said = str(detail.get("budget_warning") or "")
    if said in night.notes:
        night.notes.remove(said)
    budget = night.cfg.budget
    first = int(detail.get("calls") or 0)
    tokens = round(int(detail.get("tokens") or 0) * calls / first) if first else 0
    warning = budget_warning(calls=calls, tokens=tokens, max_calls=budget.max_calls,
                             max_tokens=budget.max_tokens)  # fmt: skip
    if warning:
        night.notes.append(warning)
        night.progress.note(warning)
        night.noise.budget_is_tight()
    elif said:
        night.progress.note("the revised estimate fits the budget: the warning no longer holds")
    detail["budget_warning"] = warning


def _measured_alike(records: list[NightRecord], noise: float) -> bool:
    """Whether a measured learning night of this project had about tonight's noise."""
    return any(
        r.kind == LEARNING and r.tasks and r.noise is not None
        and abs(r.noise - noise) <= NOISE_SCALE
        for r in records
    )  # fmt: skip
