"""Step stage 6, evaluate and conclude: the candidate against the current skill, and the gate.

With the gate on, the candidate is judged on paired validation samples (edit by edit when
it fails); off, on its validation score against current and best. :func:`conclude` turns
the verdict into the run state after the step and its record fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from skillopt.gate import GateOutcome, paired_outcome, trainer_outcome
from skillopt.redact import sanitize
from skillopt.skilldoc import (
    append_notes,
    carry_regions,
)
from skillopt.trainer.config import UpdateMode
from skillopt.trainer.paired_gate import Rebuild, judge_step
from skillopt.trainer.persistence import RunState, StepBufferEntry
from skillopt.trainer.replies import (
    EditItem,
    fit_summaries,
)
from skillopt.trainer.rollouts import failure_patterns, mean_scores
from skillopt.trainer.run_context import skill_hash
from skillopt.trainer.step.context import REJECTED_EDITS_BUDGET, Record, StepInput
from skillopt.trainer.step.rollout import RolledOut
from skillopt.trainer.step.select import Selected
from skillopt.trainer.step.update import rewrite_skill, update_patch
from skillopt.types import GateAction

if TYPE_CHECKING:
    from skillopt.trainer.core import TrainerCore

__all__ = ["Evaluated", "conclude", "evaluate"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Evaluated:
    state: RunState  # with the candidate's val scores cached
    hard: float
    soft: float
    cached: bool
    score: float
    outcome: GateOutcome
    text: str = ""  # the skill the gate judged ("" = the candidate as proposed)
    fields: Record = field(default_factory=dict)  # the paired gate's record
    dropped: tuple[EditItem, ...] = ()  # edits attribution found harmful


async def evaluate(
    core: TrainerCore,
    inp: StepInput,
    candidate: str,
    edits: Sequence[EditItem] = (),
    notes: Sequence[str] = (),
) -> Evaluated:
    """The gate's verdict on the candidate: with the gate on, the paired decision against
    the current skill on fresh val samples (edit by edit when it fails); with it off (or for
    a candidate identical to the current skill, a tie read from the selection cache), the
    candidate's val scores against current and best."""
    if core.cfg.gate.gated and skill_hash(candidate) != skill_hash(inp.skill):
        return await _paired_verdict(core, inp, candidate, edits, notes)
    state, hard, soft, cached = await core.validate(
        inp.state, candidate, inp.dir / "selection_eval"
    )
    score = core.score(hard, soft)
    outcome = trainer_outcome(
        candidate=score,
        current=state.current_score,
        best=state.best_score,
        use_gate=core.cfg.gate.gated,
    )
    return Evaluated(state=state, hard=hard, soft=soft, cached=cached, score=score, outcome=outcome)


async def _paired_verdict(
    core: TrainerCore,
    inp: StepInput,
    candidate: str,
    edits: Sequence[EditItem],
    notes: Sequence[str],
) -> Evaluated:
    verdict = await judge_step(
        core,
        step=inp.step,
        current=inp.skill,
        candidate=candidate,
        edits=edits,
        rebuild=_rebuilder(core, inp, notes),
        out_dir=inp.dir / "gate",
    )
    decision = verdict.comparison.decision
    hard, soft = mean_scores(verdict.comparison.candidate_results)
    digest = skill_hash(verdict.text)
    cache = {**inp.state.selection_cache, digest: (hard, soft)}
    return Evaluated(
        state=inp.state.model_copy(update={"selection_cache": cache}),
        hard=hard,
        soft=soft,
        cached=False,
        score=decision.candidate,
        outcome=paired_outcome(decision),
        text=verdict.text,
        fields=verdict.record(),
        dropped=verdict.dropped,
    )


def _rebuilder(core: TrainerCore, inp: StepInput, notes: Sequence[str]) -> Rebuild | None:
    """How the step's candidate is rebuilt from a subset of its edits, for attribution
    (a full rewrite is one whole skill: it has no edits to attribute)."""
    mode = core.cfg.optimizer.update_mode
    if mode is UpdateMode.FULL_REWRITE:
        return None

    async def rebuild(edits: Sequence[EditItem]) -> str | None:
        if mode is UpdateMode.PATCH:
            text = update_patch(inp.skill, edits)[0]
        else:
            rewrite = await rewrite_skill(core.ctx, inp.skill, edits, step_buffer=inp.step_buffer)
            if rewrite is None:
                return None
            text = carry_regions(inp.skill, rewrite.new_skill)
        return sanitize(append_notes(text, notes) if notes else text)

    return rebuild


def conclude(
    core: TrainerCore,
    inp: StepInput,
    rolled: RolledOut,
    selected: Selected,
    candidate: str,
    verdict: Evaluated,
) -> tuple[RunState, str, Record]:
    """Apply the verdict: the new state, the skill after the step, the gate's record fields."""
    run, step, outcome = core.run_dir, inp.step, verdict.outcome
    update: Record = {}
    if outcome.becomes_current:
        update.update(
            current_skill_path=run.rel(run.skill_path(step)),
            current_score=verdict.score,
            current_origin=f"step_{step:04d}",
        )
    if outcome.becomes_best:
        update.update(
            best_score=verdict.score,
            best_step=step,
            best_origin=f"step_{step:04d}",
            best_skill_path=run.rel(inp.dir / "candidate_skill.md"),
        )
    rejected = outcome.action is GateAction.REJECT
    results = rolled.results
    entry = StepBufferEntry(
        step=step,
        action=outcome.action.value,
        n_total=len(results),
        n_fail=sum(1 for r in results if not r.passed),
        failure_patterns=failure_patterns(results),
        score_before=verdict.state.current_score if rejected else None,
        score_after=verdict.score if rejected else None,
        rejected_edits=fit_summaries(
            selected.edits if rejected else verdict.dropped, REJECTED_EDITS_BUDGET
        ),
    )
    update.update(
        step_buffer=[*verdict.state.step_buffer, entry],
        step_buffer_epoch=inp.epoch,
        last_completed_step=step,
    )
    run.write_json(inp.dir / "trajectory_digest.json", entry.model_dump(mode="json"))
    fields = {
        "selection_hard": verdict.hard,
        "selection_soft": verdict.soft,
        "selection_cached": verdict.cached,
        "gate_metric": core.cfg.gate.metric.value,
        "candidate_gate_score": verdict.score,
        "action": outcome.action.value,
        "gate": outcome.decision.arithmetic,
        **verdict.fields,
    }
    skill = candidate if outcome.becomes_current else inp.skill
    return verdict.state.model_copy(update=update), skill, fields
