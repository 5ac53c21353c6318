"""Step stage 5, update: the selected edits applied to the skill, giving the candidate.

By the update mode: the edits applied as a patch, one whole-skill rewrite taken as is, or
the optimizer rewriting the skill from the edits. The analysts' execution-lapse notes join
the candidate's appendix before the gate (consolidated when it grows long).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skillopt.errors import ReplyFormatError, RetryableBackendError
from skillopt.prompts import render_prompt
from skillopt.skilldoc import (
    Region,
    append_notes,
    appendix_notes,
    apply_edits,
    carry_regions,
    strip_region,
)
from skillopt.trainer.config import UpdateMode
from skillopt.trainer.replies import (
    ConsolidateReply,
    EditItem,
    RewriteReply,
    fit_summaries,
)
from skillopt.trainer.run_context import RunContext
from skillopt.trainer.step.context import SUGGESTIONS_BUDGET, Record, StepInput, ask
from skillopt.trainer.step.reflect import UpdateFailure
from skillopt.trainer.step.select import Selected
from skillopt.types import EditRecord

if TYPE_CHECKING:
    from skillopt.trainer.core import TrainerCore

__all__ = ["Candidate", "add_notes", "consolidate_notes", "rewrite_skill", "update", "update_patch"]


async def consolidate_notes(ctx: RunContext, notes: Sequence[str]) -> list[str] | None:
    """A shorter appendix from the optimizer, or None (kept only if strictly shorter)."""
    prompt = render_prompt(
        "appendix_consolidate", n_notes=len(notes), notes="\n".join(f"- {n}" for n in notes)
    )
    try:
        reply = await ask(ctx, prompt, ConsolidateReply, "appendix_consolidate")
    except (ReplyFormatError, RetryableBackendError) as exc:
        ctx.note(stage="appendix_consolidate", error=str(exc))
        return None
    compact = [n.strip() for n in reply.value.appendix_notes if n.strip()]
    if not compact or sum(map(len, compact)) >= sum(map(len, notes)):
        return None
    return compact


def update_patch(skill: str, edits: Sequence[EditItem]) -> tuple[str, list[dict[str, Any]]]:
    """Apply ranked edits in order; one report row per edit."""
    records = [EditRecord(op=e.op, content=e.content, anchor=e.target) for e in edits]
    application = apply_edits(skill, records)
    rows = [
        {
            "index": o.index + 1,
            "op": o.edit.op,
            "target": o.edit.anchor[:200],
            "content_preview": o.edit.content[:200],
            "status": o.status.value,
            "reason": o.reason,
        }
        for o in application.outcomes
    ]
    return application.text, rows


async def rewrite_skill(
    ctx: RunContext, skill: str, edits: Sequence[EditItem], *, step_buffer: str
) -> RewriteReply | None:
    """Rewrite-from-suggestions mode: the ranked edits are the suggestions."""
    suggestions = "\n".join(f"- {line}" for line in fit_summaries(edits, SUGGESTIONS_BUDGET))
    prompt = render_prompt(
        "rewrite",
        skill=skill.strip() or "(empty)",
        step_buffer=step_buffer,
        suggestions=suggestions,
    )
    try:
        reply = await ask(ctx, prompt, RewriteReply, "rewrite")
    except (ReplyFormatError, RetryableBackendError) as exc:
        ctx.note(stage="rewrite", error=str(exc))
        return None
    value: RewriteReply = reply.value
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """The skill the step proposes, or why there is none (``skip``)."""

    text: str = ""
    skip: str = ""
    failure: UpdateFailure | None = None
    fields: Record = field(default_factory=dict)


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
