"""Step stages 3 and 4, merge and select: the patches become one ranked list of edits.

The patches are merged (:mod:`skillopt.trainer.merge`), then the step's edit budget (the
schedule's, or the optimizer's own under autonomous control) decides how many edits the
update may apply, ranked when there are more; a full rewrite's edits are not ranked.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skillopt.errors import ReplyFormatError, RetryableBackendError
from skillopt.optimizer.budget import scheduled_budget
from skillopt.optimizer.rank import needs_ranking, select_edits_detailed
from skillopt.prompts import render_prompt
from skillopt.trainer.config import LrControl, UpdateMode
from skillopt.trainer.merge import MergeOutcome, merge_sides
from skillopt.trainer.replies import (
    BudgetReply,
    EditItem,
    MergeFullReply,
    MergeReply,
    RankReply,
    SourceType,
)
from skillopt.trainer.rollouts import mean_scores
from skillopt.trainer.run_context import RunContext
from skillopt.trainer.step.context import Record, StepInput, ask
from skillopt.trainer.step.reflect import Patch, Reflected, meant_edits
from skillopt.trainer.step.rollout import RolledOut

if TYPE_CHECKING:
    from skillopt.trainer.core import TrainerCore

__all__ = ["Selected", "autonomous_budget", "merge", "merge_patches", "rank_edits", "select"]


async def merge_patches(
    ctx: RunContext, patches: Sequence[Patch], *, skill: str, meta_skill: str
) -> MergeOutcome:
    async def call(
        group: Sequence[Sequence[EditItem]], level: int, side: SourceType | None
    ) -> list[EditItem] | None:
        guidance = (
            f"All patches come from the {side.value} side; merge them at level {level}."
            if side is not None
            else "Combine the failure-side proposals (higher priority) with the success-side ones."
        )
        full = ctx.cfg.optimizer.update_mode is UpdateMode.FULL_REWRITE
        if full:
            payload: list[Any] = [
                {
                    "new_skill": e.content,
                    "title": e.target,
                    "support_count": e.support_count,
                    "source_type": e.source_type.value,
                }
                for p in group
                for e in p
            ]
        else:
            payload = [
                {"level": level, "edits": [e.model_dump(mode="json") for e in p]} for p in group
            ]
        prompt = render_prompt(
            "merge_full" if full else "merge",
            merge_guidance=guidance,
            skill=skill.strip() or "(empty)",
            meta_skill=meta_skill or "(none)",
            n_patches=len(group),
            patches=json.dumps(payload, sort_keys=True, ensure_ascii=False),
        )
        try:
            reply = await ask(ctx, prompt, MergeFullReply if full else MergeReply, "merge")
        except (ReplyFormatError, RetryableBackendError) as exc:
            ctx.note(stage="merge", level=level, error=str(exc))
            return None
        source = side or SourceType.FAILURE
        proposed = (
            [c.as_edit(source) for c in reply.value.skill_candidates[:1]]
            if full
            else list(reply.value.edits)
        )
        edits, refused = meant_edits(proposed, template="merge_full" if full else "merge")
        for why in refused:
            ctx.note(stage="merge", level=level, refused=why)
        if not edits and (full or refused):  # nothing meant: the group is concatenated
            return None
        return edits

    return await merge_sides(
        [list(p.edits) for p in patches if p.side is SourceType.FAILURE],
        [list(p.edits) for p in patches if p.side is SourceType.SUCCESS],
        group_size=ctx.cfg.reflect.merge_batch_size,
        merge=call,
    )


async def rank_edits(
    ctx: RunContext, items: Sequence[EditItem], *, budget: int, skill: str, meta_skill: str
) -> tuple[list[EditItem], dict[str, Any]]:
    """Keep at most ``budget`` edits; ask the optimizer only when there are more."""
    if not needs_ranking(len(items), budget):
        return list(items), {"ranked_by": "pass_through", "n_items": len(items)}
    if budget <= 0:
        return [], {"ranked_by": "zero_budget", "n_items": len(items)}
    candidates = "\n".join(
        f"[{i}] op={e.op} target={e.target!r} content={e.content!r} "
        f"support={e.support_count} source={e.source_type.value}"
        for i, e in enumerate(items)
    )
    prompt = render_prompt(
        "rank",
        budget=budget,
        n_items=len(items),
        skill=skill.strip() or "(empty)",
        meta_skill=meta_skill or "(none)",
        candidates=candidates,
    )
    indices: list[int] | None = None
    try:
        reply = await ask(ctx, prompt, RankReply, "rank")
        indices = list(reply.value.selected_indices)
    except (ReplyFormatError, RetryableBackendError) as exc:
        ctx.note(stage="rank", error=str(exc))
    selection = select_edits_detailed(indices, len(items), budget)
    return [items[i] for i in selection.indices], {
        "ranked_by": "fallback_first_k" if selection.fallback else "optimizer",
        "n_items": len(items),
        "selected_indices": list(selection.indices),
        "note": selection.note,
    }


async def autonomous_budget(
    ctx: RunContext,
    items: Sequence[EditItem],
    *,
    fallback: int,
    skill: str,
    evidence: str,
    step_buffer: str,
    meta_skill: str,
    decision_path: Path,
) -> tuple[int, dict[str, Any]]:
    """Ask the optimizer how many edits to apply; clamp to what is available. A failed or
    invalid answer falls back to the schedule's budget (never to zero edits)."""
    saved = ctx.run.read_json_opt(decision_path)
    if saved is not None:
        return int(saved["learning_rate"]), dict(saved)
    prompt = render_prompt(
        "lr_autonomous",
        skill=skill.strip() or "(empty)",
        evidence=evidence,
        step_buffer=step_buffer,
        meta_skill=meta_skill or "(none)",
        n_items=len(items),
        items="\n".join(f"[{i}] {e.summary()}" for i, e in enumerate(items)),
    )
    decision: dict[str, Any] = {"available_update_items": len(items), "fallback": False}
    try:
        reply = await ask(ctx, prompt, BudgetReply, "lr_autonomous")
        raw = int(reply.value.learning_rate)
        decision.update(
            raw_learning_rate=raw,
            reasoning=reply.value.reasoning,
            confidence=reply.value.confidence,
            risk_notes=reply.value.risk_notes,
        )
    except (ReplyFormatError, RetryableBackendError) as exc:
        ctx.note(stage="lr_autonomous", error=str(exc))
        raw = fallback
        decision.update(raw_learning_rate=None, fallback=True, error=str(exc))
    budget = min(raw, len(items))
    decision.update(learning_rate=budget, clamped=budget != raw)
    ctx.run.write_json(decision_path, decision)
    return budget, decision


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
