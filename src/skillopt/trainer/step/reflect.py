"""Step stage 2, reflect: analysts read the rollouts and propose patches to the skill.

Rollouts are cut into seeded minibatches of failures and (unless ``failure_only``)
successes; each analyst call reads one with the step buffer (what earlier steps tried) and
returns a :class:`Patch`, on disk before the stage returns and found again on resume.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skillopt.concurrency import gather_indexed
from skillopt.errors import BackendError, ReplyFormatError, RetryableBackendError
from skillopt.prompts import render_prompt
from skillopt.redact import sanitize
from skillopt.trainer.config import TrainerConfig, UpdateMode
from skillopt.trainer.envs.base import RolloutResult
from skillopt.trainer.persistence import StepBufferEntry
from skillopt.trainer.replies import (
    AnalystFullReply,
    AnalystReply,
    EditItem,
    SourceType,
    analyst_shape,
)
from skillopt.trainer.rollouts import mean_scores
from skillopt.trainer.run_context import RunContext
from skillopt.trainer.scorers.base import unscored
from skillopt.trainer.step.context import Record, StepInput, ask
from skillopt.trainer.step.rollout import RolledOut
from skillopt.types import GateAction
from skillopt.unmeant_edits import unmeant_reason

if TYPE_CHECKING:
    from skillopt.trainer.core import TrainerCore

__all__ = [
    "Analysis",
    "Patch",
    "Reflected",
    "UpdateFailure",
    "analyse",
    "format_step_buffer",
    "meant_edits",
    "partition",
    "patch_counts",
    "reflect",
]


def format_step_buffer(entries: Sequence[StepBufferEntry]) -> str:
    if not entries:
        return "(none yet in this epoch)"
    lines = []
    for e in entries:
        line = f"Step {e.step}: {e.action}; {e.n_fail}/{e.n_total} attempts failed."
        if e.failure_patterns:
            pats = ", ".join(f"{p['label']} x{p['count']}" for p in e.failure_patterns)
            line += f" Failure patterns: {pats}."
        if e.action == GateAction.REJECT:
            line += f" Score {e.score_before} -> {e.score_after}; these edits were rejected:"
            line += "".join(f"\n  - {s}" for s in e.rejected_edits)
        lines.append(line)
    return "\n".join(lines)


def _format_trajectories(results: Sequence[RolloutResult], limit: int) -> str:
    blocks = []
    for k, r in enumerate(results, start=1):
        text = r.trajectory if len(r.trajectory) <= limit else r.trajectory[:limit] + "\n[...]"
        blocks.append(
            f"### Attempt {k} (id={r.task_id})\nTask type: {r.task_type}\n"
            f"Outcome: {'PASS' if r.passed else 'FAIL'}\n"
            + (f"Failure: {r.reason}\n" if r.reason else "")
            + text
        )
    return "\n\n---\n\n".join(blocks)


_LAPSE_GUIDANCE = (
    "\nFirst decide for each pattern whether it is a SKILL DEFECT (the skill lacks or misstates "
    "a rule: propose an edit) or an EXECUTION LAPSE (the skill already says the right thing "
    'and the model did not follow it: add a one-line reminder to "appendix_notes" instead, '
    "and no edit). Reminders restate existing rules; they never add new ones. When unsure, "
    "treat it as a lapse.\n"
)


_SIDE_GUIDANCE = {
    SourceType.FAILURE: (
        "All of these attempts FAILED. Find the patterns behind the failures and propose rules "
        "that would have prevented them."
    ),
    SourceType.SUCCESS: (
        "All of these attempts SUCCEEDED. Propose rules only for generalisable practices that "
        "made them work and that the skill does not state yet."
    ),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Patch:
    side: SourceType
    index: int
    item_ids: tuple[str, ...]
    batch_size: int
    patterns: tuple[dict[str, Any], ...]
    edits: tuple[EditItem, ...]
    notes: tuple[str, ...] = ()  # execution-lapse reminders for the appendix
    refused: tuple[str, ...] = ()  # edits that could not be meant, and why (never tried)

    def to_json(self) -> dict[str, Any]:
        return {
            "side": self.side.value,
            "index": self.index,
            "item_ids": list(self.item_ids),
            "batch_size": self.batch_size,
            "patterns": list(self.patterns),
            "edits": [e.model_dump(mode="json") for e in self.edits],
            "notes": list(self.notes),
            "refused": list(self.refused),
        }

    @staticmethod
    def from_json(raw: dict[str, Any]) -> Patch:
        return Patch(
            side=SourceType(raw["side"]),
            index=int(raw["index"]),
            item_ids=tuple(raw["item_ids"]),
            batch_size=int(raw["batch_size"]),
            patterns=tuple(raw["patterns"]),
            edits=tuple(EditItem.model_validate(e) for e in raw["edits"]),
            notes=tuple(raw.get("notes", ())),
            refused=tuple(raw.get("refused", ())),
        )


def partition(
    results: Sequence[RolloutResult], *, seed: int, minibatch: int, failure_only: bool
) -> list[tuple[SourceType, int, list[RolloutResult]]]:
    """Seeded minibatches: failures shuffled with ``seed``, successes with ``seed + 1``. An
    answer the judge could not score is neither: it teaches nothing."""
    results = [r for r in results if not unscored(r)]
    fails = [r for r in results if not r.passed]
    succs = [] if failure_only else [r for r in results if r.passed]
    random.Random(seed).shuffle(fails)
    random.Random(seed + 1).shuffle(succs)
    out: list[tuple[SourceType, int, list[RolloutResult]]] = []
    for side, pool in ((SourceType.FAILURE, fails), (SourceType.SUCCESS, succs)):
        for idx, start in enumerate(range(0, len(pool), minibatch)):
            out.append((side, idx, pool[start : start + minibatch]))
    return out


def _analyst_prompt(
    cfg: TrainerConfig,
    side: SourceType,
    batch: Sequence[RolloutResult],
    skill: str,
    step_buffer: str,
    meta_skill: str,
) -> str:
    full = cfg.optimizer.update_mode is UpdateMode.FULL_REWRITE
    values: dict[str, Any] = {
        "side_guidance": _SIDE_GUIDANCE[side],
        "n_trajectories": len(batch),
        "skill": skill.strip() or "(empty)",
        "step_buffer": step_buffer,
        "meta_skill": meta_skill or "(none)",
        "trajectories": _format_trajectories(batch, cfg.reflect.max_trajectory_chars),
    }
    if not full:
        values["lapse_guidance"] = _LAPSE_GUIDANCE if cfg.reflect.skill_aware else ""
        values["edit_budget"] = cfg.optimizer.learning_rate
    return render_prompt("analyst_full" if full else "analyst", **values)


def meant_edits(
    edits: Sequence[EditItem], *, template: str, instructions: str = ""
) -> tuple[list[EditItem], list[str]]:
    """``edits`` without the ones that cannot be meant (the prompt ``template``'s own
    example, a placeholder such as ``<new text or empty>``, a line of its instructions:
    :func:`~skillopt.unmeant_edits.unmeant_reason`, as the night refuses them), and why
    each left out was. Refused here, they cost no merge, update or gate call."""
    kept: list[EditItem] = []
    refused: list[str] = []
    for edit in edits:
        why = (
            unmeant_reason(edit.content, template=template, instructions=instructions)
            if edit.content.strip()
            else ""
        )
        if why:
            refused.append(f"{edit.op} edit refused: {why}")
        else:
            kept.append(edit)
    return kept, refused


def _patch(
    cfg: TrainerConfig,
    side: SourceType,
    idx: int,
    batch: Sequence[RolloutResult],
    reply: AnalystReply | AnalystFullReply,
) -> Patch:
    """An analyst's reply as a patch: at most ``learning_rate`` edits (one whole skill in
    full-rewrite mode), each supported by the minibatch it came from."""
    support = max(reply.batch_size, 1)
    notes: list[str] = []
    if isinstance(reply, AnalystFullReply):
        proposed, refused = meant_edits(
            [c.as_edit(side) for c in reply.patch.skill_candidates[:1]], template="analyst_full"
        )
    else:
        proposed, refused = meant_edits(
            reply.patch.edits,
            template="analyst",
            instructions=f"{_SIDE_GUIDANCE[side]}\n{_LAPSE_GUIDANCE}",
        )
        proposed = proposed[: cfg.optimizer.learning_rate]
        for note in reply.appendix_notes:
            why = unmeant_reason(note, template="analyst") if note.strip() else "blank"
            if why:
                refused.append(f"appendix note refused: {why}")
            else:
                notes.append(note)
    edits = tuple(
        e.model_copy(update={"source_type": side, "support_count": support}) for e in proposed
    )
    return Patch(
        side=side,
        index=idx,
        item_ids=tuple(r.task_id for r in batch),
        batch_size=reply.batch_size,
        patterns=tuple(p.model_dump(mode="json") for p in reply.patterns),
        edits=edits,
        notes=tuple(notes) if cfg.reflect.skill_aware else (),
        refused=tuple(refused),
    )


def _noted(ctx: RunContext, tag: str, patch: Patch) -> Patch:
    """``patch``, its refused edits noted in the step's diagnostics (a resumed step's too)."""
    for why in patch.refused:
        ctx.note(stage="analyst", minibatch=f"{tag}_{patch.index:03d}", refused=why)
    return patch


@dataclass(frozen=True, slots=True, kw_only=True)
class Analysis:
    """The analysts' patches, and why the analysts that gave none failed (in order)."""

    patches: tuple[Patch, ...]
    minibatches: int
    failures: tuple[str, ...] = ()

    @property
    def all_failed(self) -> bool:
        return self.minibatches > 0 and len(self.failures) == self.minibatches


async def analyse(
    ctx: RunContext,
    results: Sequence[RolloutResult],
    *,
    skill: str,
    patches_dir: Path,
    seed: int,
    step_buffer: str,
    meta_skill: str,
) -> Analysis:
    """Run the analysts over seeded minibatches; reuse patch files of an earlier attempt."""
    cfg = ctx.cfg
    batches = partition(
        results,
        seed=seed,
        minibatch=cfg.reflect.minibatch_size,
        failure_only=cfg.reflect.failure_only,
    )
    backend_failures: list[str] = []

    async def one(side: SourceType, idx: int, batch: list[RolloutResult]) -> Patch | str:
        tag = "fail" if side is SourceType.FAILURE else "succ"
        path = patches_dir / f"minibatch_{tag}_{idx:03d}.json"
        saved = ctx.run.read_json_opt(path)
        if saved is not None:
            return _noted(ctx, tag, Patch.from_json(saved))
        full = cfg.optimizer.update_mode is UpdateMode.FULL_REWRITE
        prompt = _analyst_prompt(cfg, side, batch, skill, step_buffer, meta_skill)
        schema = AnalystFullReply if full else AnalystReply
        shape = None if full else analyst_shape(cfg.optimizer.learning_rate)
        try:
            reply = await ask(ctx, prompt, schema, "analyst", shape)
        except ReplyFormatError as exc:  # kept beside where its patch would have been
            kept = path.with_suffix(".unusable.json")
            ctx.run.write_json(kept, {"error": str(exc), "problems": list(exc.problems),
                                      "reply": sanitize(exc.raw)})  # fmt: skip
            ctx.note(stage="analyst", file=ctx.run.rel(kept), error=str(exc))
            return str(exc)
        except RetryableBackendError as exc:  # no reply to keep, and no patch written
            ctx.note(stage="analyst", minibatch=f"{tag}_{idx:03d}", error=str(exc))
            backend_failures.append(str(exc))
            return str(exc)
        patch = _patch(cfg, side, idx, batch, reply.value)
        ctx.run.write_json(path, patch.to_json())
        return _noted(ctx, tag, patch)

    outcomes = await gather_indexed(lambda pos: one(*batches[pos]), len(batches))
    if batches and len(backend_failures) == len(batches):
        # Not a step with nothing to learn: the optimizer was unreachable. Stop before the
        # step is recorded, so a resumed run redoes it instead of skipping it for good.
        raise BackendError(
            f"all {len(batches)} analyst calls failed in {ctx.run.rel(patches_dir)}; "
            f"last error: {backend_failures[-1]}"
        )
    return Analysis(
        patches=tuple(p for p in outcomes if isinstance(p, Patch)),
        minibatches=len(batches),
        failures=tuple(p for p in outcomes if isinstance(p, str)),
    )


def patch_counts(patches: Sequence[Patch]) -> tuple[int, int]:
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
            fail, succ = patch_counts(self.per_batch[a].patches)
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
        fail, succ = patch_counts(self.patches)
        return {
            "accumulation_batches": batches,
            "n_patches": fail + succ,
            "n_failure_patches": fail,
            "n_success_patches": succ,
        }


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
