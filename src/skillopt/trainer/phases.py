"""One training step as phase functions: rollout -> reflect -> merge -> select -> update ->
evaluate, each over a typed input and returning a typed result.

Every phase writes its own files under the step directory (so a resumed run finds finished
work) and contributes its fields to the step record; :func:`run_step` composes them, times
them, and is the only place that decides a step is skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillopt.concurrency import gather_indexed
from skillopt.gate import GateOutcome, paired_outcome, trainer_outcome
from skillopt.optimizer.budget import scheduled_budget
from skillopt.optimizer.meta import meta_context
from skillopt.redact import sanitize
from skillopt.skilldoc import Region, append_notes, appendix_notes, carry_regions, strip_region
from skillopt.trainer.config import LrControl, UpdateMode
from skillopt.trainer.core import TrainerCore
from skillopt.trainer.data import BatchSpec
from skillopt.trainer.envs.base import RolloutResult
from skillopt.trainer.merge import MergeOutcome
from skillopt.trainer.paired_gate import Rebuild, judge_step
from skillopt.trainer.persistence import RunState, StepBufferEntry
from skillopt.trainer.replies import EditItem, fit_summaries
from skillopt.trainer.sample_ids import train_sample
from skillopt.trainer.steps import (
    REJECTED_EDITS_BUDGET,
    Analysis,
    Patch,
    StageCounter,
    analyse,
    autonomous_budget,
    consolidate_notes,
    failure_patterns,
    format_step_buffer,
    mean_scores,
    merge_patches,
    rank_edits,
    rewrite_skill,
    rollout,
    skill_hash,
    update_patch,
)
from skillopt.trainer.timing import StepTimer
from skillopt.types import GateAction

__all__ = [
    "Candidate",
    "Evaluated",
    "Reflected",
    "RolledOut",
    "Selected",
    "StepInput",
    "UpdateFailure",
    "add_notes",
    "conclude",
    "evaluate",
    "merge",
    "reflect",
    "roll_out",
    "run_step",
    "select",
    "step_input",
    "update",
]

Record = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepInput:
    """What every phase of one step reads."""

    step: int
    epoch: int
    step_in_epoch: int
    micro: tuple[BatchSpec, ...]
    state: RunState
    skill: str  # the current skill
    step_buffer: str  # earlier steps of this epoch, as the prompts show them
    meta_skill: str  # the optimizer's memory, as the prompts show it
    dir: Path

    def batch_dir(self, index: int) -> Path:
        return self.dir if len(self.micro) == 1 else self.dir / f"batch_{index}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RolledOut:
    per_batch: tuple[tuple[RolloutResult, ...], ...]

    @property
    def results(self) -> list[RolloutResult]:
        return [r for batch in self.per_batch for r in batch]

    def record(self) -> Record:
        hard, soft = mean_scores(self.results)
        return {"rollout_hard": hard, "rollout_soft": soft, "rollout_n": len(self.results)}


def _patch_counts(patches: Sequence[Patch]) -> tuple[int, int]:
    fail = sum(1 for p in patches if p.side.value == "failure" and p.edits)
    succ = sum(1 for p in patches if p.side.value == "success" and p.edits)
    return fail, succ


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateFailure:
    """Why a step learned nothing although it had something to learn from."""

    stage: str
    cause: str

    def record(self) -> Record:
        return {"update_failed": {"stage": self.stage, "cause": self.cause}}


@dataclass(frozen=True, slots=True, kw_only=True)
class Reflected:
    per_batch: tuple[Analysis, ...]

    @property
    def patches(self) -> list[Patch]:
        return [p for analysis in self.per_batch for p in analysis.patches]

    @property
    def failure(self) -> UpdateFailure | None:
        """Every analyst call of the step failed (an unusable reply, or an outage)."""
        if not self.per_batch or not all(a.all_failed for a in self.per_batch):
            return None
        causes = [f for a in self.per_batch for f in a.failures]
        return UpdateFailure(
            stage="analyst", cause=f"all {len(causes)} analyst calls failed; first: {causes[0]}"
        )

    @property
    def notes(self) -> list[str]:
        return [note for p in self.patches for note in p.notes]

    @property
    def proposes_anything(self) -> bool:
        return any(p.edits for p in self.patches) or bool(self.notes)

    def record(self, inp: StepInput, rolled: RolledOut) -> Record:
        batches = []
        for a, spec in enumerate(inp.micro):
            hard, soft = mean_scores(rolled.per_batch[a])
            fail, succ = _patch_counts(self.per_batch[a].patches)
            batches.append(
                {
                    "batch_idx": spec.index,
                    "batch_seed": spec.seed,
                    "n_envs": len(spec.item_ids),
                    "hard": hard,
                    "soft": soft,
                    "n_failure_patches": fail,
                    "n_success_patches": succ,
                }
            )
        fail, succ = _patch_counts(self.patches)
        return {
            "accumulation_batches": batches,
            "n_patches": fail + succ,
            "n_failure_patches": fail,
            "n_success_patches": succ,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Selected:
    edits: tuple[EditItem, ...]
    n_merged: int
    budget: int | None
    lr_control: str
    lr_decision: Record | None

    def record(self) -> Record:
        out: Record = {
            "n_edits_merged": self.n_merged,
            "n_edits_ranked": len(self.edits),
            "edit_budget": self.budget,
            "lr_control_mode": self.lr_control,
            "support_counts": [e.support_count for e in self.edits],
        }
        if self.lr_decision is not None:
            out["lr_decision"] = self.lr_decision
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """The skill the step proposes, or why there is none (``skip``)."""

    text: str = ""
    skip: str = ""
    failure: UpdateFailure | None = None
    fields: Record = field(default_factory=dict)


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


# --------------------------------------------------------------------------- phases


async def roll_out(core: TrainerCore, inp: StepInput) -> RolledOut:
    """Every micro-batch at once, under the current skill."""

    async def one(a: int) -> list[RolloutResult]:
        items = [core.items[i] for i in inp.micro[a].item_ids]
        where = inp.batch_dir(a) / "rollout"
        return await rollout(core.ctx, items, inp.skill, where, train_sample(inp.step))

    per_batch = await gather_indexed(one, len(inp.micro))
    return RolledOut(per_batch=tuple(tuple(b) for b in per_batch))


async def reflect(core: TrainerCore, inp: StepInput, rolled: RolledOut) -> Reflected:
    """The analysts of every micro-batch at once."""

    async def one(a: int) -> Analysis:
        return await analyse(
            core.ctx,
            rolled.per_batch[a],
            skill=inp.skill,
            patches_dir=inp.batch_dir(a) / "patches",
            seed=inp.micro[a].seed,
            step_buffer=inp.step_buffer,
            meta_skill=inp.meta_skill,
        )

    return Reflected(per_batch=tuple(await gather_indexed(one, len(inp.micro))))


async def merge(core: TrainerCore, inp: StepInput, reflected: Reflected) -> MergeOutcome:
    merged = await merge_patches(
        core.ctx, reflected.patches, skill=inp.skill, meta_skill=inp.meta_skill
    )
    core.run_dir.write_json(
        inp.dir / "merged_patch.json",
        {
            "edits": [e.model_dump(mode="json") for e in merged.edits],
            "merge_calls": merged.calls,
            "merge_depth": merged.depth,
            "fallbacks": merged.fallbacks,
        },
    )
    return merged


async def select(
    core: TrainerCore, inp: StepInput, rolled: RolledOut, merged: MergeOutcome
) -> Selected:
    """The edits to apply: all of a full rewrite's, else at most the step's budget (set by
    the schedule, or by the optimizer under autonomous control), ranked when over it."""
    opt = core.cfg.optimizer
    if opt.update_mode is UpdateMode.FULL_REWRITE:  # whole-skill candidates are not ranked
        ranked = list(merged.edits)
        info: Record = {"ranked_by": "none_full_rewrite", "n_items": len(ranked)}
        budget, lr_control, lr_decision = None, "none", None
    else:
        budget = scheduled_budget(
            opt.lr_scheduler,
            max_edits=opt.learning_rate,
            min_edits=opt.min_learning_rate,
            step=inp.step,
            total_steps=inp.state.total_steps,
        )
        lr_control, lr_decision = opt.lr_control.value, None
        if opt.lr_control is LrControl.AUTONOMOUS:
            budget, lr_decision = await _autonomous_budget(core, inp, rolled, merged, budget)
        ranked, info = await rank_edits(
            core.ctx, merged.edits, budget=budget, skill=inp.skill, meta_skill=inp.meta_skill
        )
    core.run_dir.write_json(
        inp.dir / "ranked_edits.json",
        {"edits": [e.model_dump(mode="json") for e in ranked], **info},
    )
    return Selected(
        edits=tuple(ranked),
        n_merged=len(merged.edits),
        budget=budget,
        lr_control=lr_control,
        lr_decision=lr_decision,
    )


async def _autonomous_budget(
    core: TrainerCore, inp: StepInput, rolled: RolledOut, merged: MergeOutcome, fallback: int
) -> tuple[int, Record]:
    results = rolled.results
    hard, soft = mean_scores(results)
    evidence = (
        f"{len(results)} attempts this step: hard {hard:.3f}, soft {soft:.3f}; "
        f"{len(merged.edits)} proposed edits after merging"
    )
    return await autonomous_budget(
        core.ctx,
        merged.edits,
        fallback=fallback,
        skill=inp.skill,
        evidence=evidence,
        step_buffer=inp.step_buffer,
        meta_skill=inp.meta_skill,
        decision_path=inp.dir / "lr_decision.json",
    )


async def update(core: TrainerCore, inp: StepInput, selected: Selected) -> Candidate:
    """The candidate skill from the selected edits, by the configured update mode."""
    run, mode = core.run_dir, core.cfg.optimizer.update_mode
    if mode is UpdateMode.PATCH:
        text, rows = update_patch(inp.skill, selected.edits)
        run.write_json(inp.dir / "edit_apply_report.json", rows)
        applied = sum(1 for r in rows if r["status"] == "applied")
        summary = {"total": len(rows), "applied": applied, "skipped": len(rows) - applied}
        return Candidate(text=text, fields={"edit_apply_summary": {**summary, "errors": 0}})
    if mode is UpdateMode.FULL_REWRITE:
        chosen = next((e for e in selected.edits if e.content.strip()), None)
        if chosen is None:
            return Candidate(skip="skip_no_rewrite")
        run.write_json(inp.dir / "full_rewrite_result.json", chosen.model_dump(mode="json"))
        return Candidate(
            text=carry_regions(inp.skill, chosen.content),
            fields={"full_rewrite_title": chosen.target},
        )
    rewrite = await rewrite_skill(core.ctx, inp.skill, selected.edits, step_buffer=inp.step_buffer)
    if rewrite is None:
        failure = UpdateFailure(stage="rewrite", cause=core.ctx.last_error("rewrite"))
        return Candidate(skip="skip_no_rewrite", failure=failure)
    run.write_json(inp.dir / "rewrite_result.json", rewrite.model_dump(mode="json"))
    return Candidate(
        text=carry_regions(inp.skill, rewrite.new_skill),
        fields={"rewrite_change_summary": rewrite.change_summary},
    )


async def add_notes(core: TrainerCore, candidate: Candidate, notes: Sequence[str]) -> Candidate:
    """Execution-lapse reminders join the candidate *before* the gate, so the skill that
    carries them is validated like any other change; a long appendix is compacted."""
    if not notes:
        return candidate
    text = append_notes(candidate.text, notes)
    fields = {
        **candidate.fields,
        "n_appendix_notes_added": len(appendix_notes(text)) - len(appendix_notes(candidate.text)),
    }
    threshold = core.cfg.reflect.consolidate_threshold
    if threshold and len(appendix_notes(text)) > threshold:
        compact = await consolidate_notes(core.ctx, appendix_notes(text))
        if compact is not None:
            text = append_notes(strip_region(text, Region.APPENDIX), compact)
        fields["appendix_consolidated"] = compact is not None
    return Candidate(text=text, fields=fields)


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


# --------------------------------------------------------------------------- the step


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
