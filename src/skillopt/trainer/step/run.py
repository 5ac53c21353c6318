"""One step, start to end: :func:`step_input` fixes its input, :func:`run_step` runs the stages.

:func:`run_step` times each stage, is the only place that decides a step is skipped (no
patch, or no candidate), and writes the step's skill whatever the outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from skillopt.backends.wrappers import StageCounter
from skillopt.optimizer.meta import meta_context
from skillopt.redact import sanitize
from skillopt.trainer.data import BatchSpec
from skillopt.trainer.persistence import RunState
from skillopt.trainer.run_context import skill_hash
from skillopt.trainer.step.conclude import conclude, evaluate
from skillopt.trainer.step.context import Record, StepInput
from skillopt.trainer.step.reflect import UpdateFailure, format_step_buffer, reflect
from skillopt.trainer.step.rollout import roll_out
from skillopt.trainer.step.select import Selected, merge, select
from skillopt.trainer.step.update import Candidate, add_notes, update
from skillopt.trainer.timing import StepTimer

if TYPE_CHECKING:
    from skillopt.trainer.core import TrainerCore

__all__ = ["run_step", "step_input"]


def step_input(
    core: TrainerCore,
    state: RunState,
    *,
    step: int,
    epoch: int,
    step_in_epoch: int,
    micro: Sequence[BatchSpec],
) -> StepInput:
    return StepInput(
        step=step,
        epoch=epoch,
        step_in_epoch=step_in_epoch,
        micro=tuple(micro),
        state=state,
        skill=core.run_dir.read_text(state.current_skill_path),
        step_buffer=format_step_buffer(state.step_buffer),
        meta_skill=meta_context(state.meta_skill),
        dir=core.run_dir.step_dir(step),
    )


async def run_step(core: TrainerCore, inp: StepInput) -> tuple[RunState, Record]:
    """One step from rollout to gate; returns the state after it and its history record."""
    core.ctx.diagnostics = []
    tokens_before = core.ctx.completer.snapshot()
    timer = StepTimer()
    record: Record = {"step": inp.step, "epoch": inp.epoch, "step_in_epoch": inp.step_in_epoch}
    with timer.phase("rollout_s"):
        rolled = await roll_out(core, inp)
    record.update(rolled.record())
    with timer.phase("reflect_s"):
        reflected = await reflect(core, inp, rolled)
    record.update(reflected.record(inp, rolled))
    state, skill = inp.state, inp.skill
    if not reflected.proposes_anything:
        state, skill = _skipped(core, inp, record, "skip_no_patches", reflected.failure)
    else:
        with timer.phase("aggregate_s"):
            merged = await merge(core, inp, reflected)
        with timer.phase("select_s"):
            selected = await select(core, inp, rolled, merged)
        record.update(selected.record())
        with timer.phase("update_s"):
            candidate = await _candidate(core, inp, selected, reflected.notes, record)
        if isinstance(candidate, Candidate):
            state, skill = _skipped(core, inp, record, candidate.skip, candidate.failure)
        else:
            with timer.phase("evaluate_s"):
                verdict = await evaluate(core, inp, candidate, selected.edits, reflected.notes)
            if verdict.text and verdict.text != candidate:  # attribution dropped edits
                core.run_dir.write_text(inp.dir / "candidate_full_skill.md", candidate)
                core.run_dir.write_text(inp.dir / "candidate_skill.md", verdict.text)
                candidate = verdict.text
            state, skill, fields = conclude(core, inp, rolled, selected, candidate, verdict)
            core.run_dir.write_text(core.run_dir.skill_path(inp.step), skill)
            record.update(fields)
    record.update(
        current_score=state.current_score,
        best_score=state.best_score,
        best_step=state.best_step,
        current_origin=state.current_origin,
        best_origin=state.best_origin,
        skill_len=len(skill),
        tokens=StageCounter.delta(tokens_before, core.ctx.completer.snapshot()),
        diagnostics=core.ctx.sorted_diagnostics(),
    )
    core.timing.add_step(inp.step, timer)
    return state, record


async def _candidate(
    core: TrainerCore, inp: StepInput, selected: Selected, notes: Sequence[str], record: Record
) -> str | Candidate:
    """The sanitized candidate on disk, or the skipped candidate when the update produced
    no skill."""
    candidate = await update(core, inp, selected)
    if candidate.skip:
        return candidate
    candidate = await add_notes(core, candidate, notes)
    record.update(candidate.fields)
    # Files hold sanitized text; the in-memory skill must be the same bytes (hashes, resume).
    text = sanitize(candidate.text)
    core.run_dir.write_text(inp.dir / "candidate_skill.md", text)
    record.update(candidate_hash=skill_hash(text), candidate_skill_len=len(text))
    return text


def _skipped(
    core: TrainerCore,
    inp: StepInput,
    record: Record,
    action: str,
    failure: UpdateFailure | None,
) -> tuple[RunState, str]:
    """A step that proposes no candidate: the skill stays, the step counts as done."""
    record["action"] = action
    if failure is not None:
        record.update(failure.record())
    core.run_dir.write_text(core.run_dir.skill_path(inp.step), inp.skill)
    return inp.state.model_copy(update={"last_completed_step": inp.step}), inp.skill
