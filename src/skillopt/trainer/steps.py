"""The stages of a training step: rollout, reflect, merge, select, update, evaluate.

Each stage is an async function over a :class:`RunContext`. Fan-out uses task groups and
places results by index; finished work (rollout rows, analyst patches) is on disk before the
stage returns, and found again on resume.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from skillopt.atomicio import AppendJournal, read_jsonl
from skillopt.backends.wrappers import StageCounter
from skillopt.concurrency import gather_indexed
from skillopt.errors import (
    BackendError,
    FatalBackendError,
    ReplyFormatError,
    RetryableBackendError,
)
from skillopt.logging import get_logger
from skillopt.optimizer.rank import needs_ranking, select_edits_detailed
from skillopt.prompts import render_prompt
from skillopt.redact import redact_obj
from skillopt.skilldoc import apply_edits, content_hash
from skillopt.trainer.config import TrainerConfig, UpdateMode
from skillopt.trainer.envs.base import (
    Environment,
    EnvItem,
    RolloutContext,
    RolloutResult,
    rollout_from_json,
    rollout_to_json,
)
from skillopt.trainer.merge import MergeOutcome, merge_sides
from skillopt.trainer.persistence import RunDir, StepBufferEntry
from skillopt.trainer.replies import (
    AnalystFullReply,
    AnalystReply,
    BudgetReply,
    ConsolidateReply,
    EditItem,
    MergeFullReply,
    MergeReply,
    RankReply,
    RewriteReply,
    SourceType,
    ask_json,
    fit_summaries,
)
from skillopt.types import EditRecord

__all__ = [
    "REJECTED_EDITS_BUDGET",
    "SUGGESTIONS_BUDGET",
    "Analysis",
    "Patch",
    "RunContext",
    "Sample",
    "StageCounter",
    "analyse",
    "autonomous_budget",
    "consolidate_notes",
    "failure_patterns",
    "format_step_buffer",
    "mean_scores",
    "merge_patches",
    "partition",
    "rank_edits",
    "rewrite_skill",
    "rollout",
    "skill_hash",
    "update_patch",
]

_log = get_logger(__name__)

#: Characters of edit suggestions one rewrite prompt carries; whole suggestions only.
SUGGESTIONS_BUDGET = 8000
#: Characters of a rejected step's edits the step buffer keeps for later prompts.
REJECTED_EDITS_BUDGET = 2000


def skill_hash(text: str) -> str:
    return content_hash(text)[:16]


@dataclass(slots=True, kw_only=True)
class RunContext:
    cfg: TrainerConfig
    env: Environment
    completer: StageCounter
    run: RunDir
    diagnostics: list[dict[str, Any]] = field(default_factory=list)

    def note(self, **event: Any) -> None:
        """Record a per-call problem (kept in the step record, never silently dropped)."""
        self.diagnostics.append(event)
        _log.warning("trainer_diagnostic", **event)

    def last_error(self, stage: str) -> str:
        """The error of the latest diagnostic noted for ``stage`` ("" when none)."""
        errors = [str(d.get("error", "")) for d in self.diagnostics if d.get("stage") == stage]
        return errors[-1] if errors else ""

    def sorted_diagnostics(self) -> list[dict[str, Any]]:
        """Diagnostics in a stable order (they arrive in completion order)."""
        return sorted(self.diagnostics, key=lambda d: json.dumps(d, sort_keys=True, default=str))


# --------------------------------------------------------------------------- rollout


def _load_final(path: Path, run: RunDir, digest: str, ids: list[str]) -> list[RolloutResult] | None:
    raw = run.read_json_opt(path)
    if raw is None:
        return None
    if raw.get("skill_hash") != digest or [r["id"] for r in raw.get("results", [])] != ids:
        return None
    return [rollout_from_json(r) for r in raw["results"]]


def _saved_rows(partial_path: Path, digest: str) -> dict[str, RolloutResult]:
    """Rows a killed run finished under the same skill. Rows that failed are tried again:
    after an outage aborted the batch, a resumed run must not reuse the very failures that
    aborted it."""
    return {
        row["result"]["id"]: rollout_from_json(row["result"])
        for row in read_jsonl(partial_path)
        if row.get("skill_hash") == digest and not row["result"].get("error")
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """Which sample a rollout draws: the default is the cacheable sample 0; the gate draws
    numbered fresh samples that bypass the response cache."""

    sample_id: int = 0
    fresh: bool = False


async def _attempt(
    ctx: RunContext, item: EnvItem, skill: str, workdir: Path, sample: Sample
) -> RolloutResult:
    """One attempt; a failed call is an error row (a fatal one stops the run)."""
    cfg = ctx.cfg.env
    rctx = RolloutContext(
        completer=ctx.completer,
        timeout_s=cfg.rollout_timeout_s,
        max_output_tokens=cfg.max_output_tokens,
        workdir=workdir,
        sample_id=sample.sample_id,
        use_cache=not sample.fresh,
    )
    # No limiter and no deadline here: the pool (or the environment's own member) bounds
    # concurrency and times each call from the moment it runs, not while it waits its turn.
    try:
        return await ctx.env.rollout(item, skill, rctx)
    except FatalBackendError:
        raise
    except (BackendError, TimeoutError) as exc:
        return RolloutResult(
            task_id=item.id,
            hard=0.0,
            soft=0.0,
            task_type=item.task_type,
            reason="error: the attempt failed",
            error=str(exc) or type(exc).__name__,
        )


async def _attempt_all(
    ctx: RunContext,
    jobs: Sequence[tuple[int, EnvItem]],
    skill: str,
    out_dir: Path,
    partial_path: Path,
    sample: Sample,
) -> list[RolloutResult]:
    """``jobs`` (index, item) concurrently; each finished row is journaled as it lands (one
    append per burst of rows, handed to the kernel at once, so a killed run keeps it). The
    fsyncs, which only a power cut needs, are grouped by time: the stage's ``results.json``
    replaces the journal when it succeeds, and a stage that fails syncs what it has."""
    digest = skill_hash(skill)
    journal = AppendJournal(partial_path)

    async def one(k: int) -> RolloutResult:
        index, item = jobs[k]
        result = await _attempt(ctx, item, skill, out_dir / "work" / f"{index:05d}", sample)
        rows_in.send_nowait({"skill_hash": digest, "result": rollout_to_json(result)})
        return result

    async def flush_rows() -> None:
        async with rows_out:
            async for row in rows_out:
                batch = [row]
                while True:
                    try:
                        batch.append(rows_out.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                journal.append(redact_obj(batch))  # on disk as results.json will be

    rows_in, rows_out = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
    try:
        async with anyio.create_task_group() as outer:
            outer.start_soon(flush_rows)
            async with rows_in:
                results = await gather_indexed(one, len(jobs))
    except BaseException:
        journal.sync()
        raise
    return results


async def rollout(
    ctx: RunContext,
    items: Sequence[EnvItem],
    skill: str,
    out_dir: Path,
    sample: Sample = Sample(),
) -> list[RolloutResult]:
    """Roll ``skill`` out on ``items`` concurrently; results in item order.

    Finished rows are appended to ``results.partial.jsonl`` as they land (batched per burst),
    so a killed run redoes only the missing (or failed) ones; the ordered ``results.json``
    replaces it at the end.
    """
    digest = skill_hash(skill)
    ids = [item.id for item in items]
    final_path = out_dir / "results.json"
    reused = _load_final(final_path, ctx.run, digest, ids)
    if reused is not None:
        return reused
    partial_path = out_dir / "results.partial.jsonl"
    done = _saved_rows(partial_path, digest)
    results: list[RolloutResult | None] = [done.get(item_id) for item_id in ids]
    todo = [(index, item) for index, item in enumerate(items) if results[index] is None]
    fresh = await _attempt_all(ctx, todo, skill, out_dir, partial_path, sample)
    for (index, _), result in zip(todo, fresh, strict=True):
        results[index] = result
    final = [r for r in results if r is not None]
    errors = sum(1 for r in final if r.error)
    if final and errors * 2 > len(final):
        raise BackendError(
            f"{errors}/{len(final)} rollouts failed in {ctx.run.rel(out_dir)}; "
            "refusing to score a mostly broken batch"
        )
    rows = [rollout_to_json(r) for r in final]
    ctx.run.write_json(final_path, {"skill_hash": digest, "results": rows})
    partial_path.unlink(missing_ok=True)
    return final


def mean_scores(results: Sequence[RolloutResult]) -> tuple[float, float]:
    """Exact means (``math.fsum``): the gate compares them strictly, so the same scores in
    another order must tie, not win by rounding noise."""
    if not results:
        return 0.0, 0.0
    n = len(results)
    return math.fsum(r.hard for r in results) / n, math.fsum(r.soft for r in results) / n


# --------------------------------------------------------------------------- reflect


def format_step_buffer(entries: Sequence[StepBufferEntry]) -> str:
    if not entries:
        return "(none yet in this epoch)"
    lines = []
    for e in entries:
        line = f"Step {e.step}: {e.action}; {e.n_fail}/{e.n_total} attempts failed."
        if e.failure_patterns:
            pats = ", ".join(f"{p['label']} x{p['count']}" for p in e.failure_patterns)
            line += f" Failure patterns: {pats}."
        if e.action == "reject":
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

    def to_json(self) -> dict[str, Any]:
        return {
            "side": self.side.value,
            "index": self.index,
            "item_ids": list(self.item_ids),
            "batch_size": self.batch_size,
            "patterns": list(self.patterns),
            "edits": [e.model_dump(mode="json") for e in self.edits],
            "notes": list(self.notes),
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
        )


def partition(
    results: Sequence[RolloutResult], *, seed: int, minibatch: int, failure_only: bool
) -> list[tuple[SourceType, int, list[RolloutResult]]]:
    """Seeded minibatches: failures shuffled with ``seed``, successes with ``seed + 1``."""
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
        proposed = [c.as_edit(side) for c in reply.patch.skill_candidates[:1]]
    else:
        proposed = reply.patch.edits[: cfg.optimizer.learning_rate]
        notes = reply.appendix_notes
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
    )


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
            return Patch.from_json(saved)
        full = cfg.optimizer.update_mode is UpdateMode.FULL_REWRITE
        prompt = _analyst_prompt(cfg, side, batch, skill, step_buffer, meta_skill)
        schema = AnalystFullReply if full else AnalystReply
        try:
            reply = await _ask(ctx, prompt, schema, "analyst")
        except (ReplyFormatError, RetryableBackendError) as exc:
            ctx.note(stage="analyst", file=ctx.run.rel(path), error=str(exc))
            if isinstance(exc, RetryableBackendError):
                backend_failures.append(str(exc))
            return str(exc)
        patch = _patch(cfg, side, idx, batch, reply.value)
        ctx.run.write_json(path, patch.to_json())
        return patch

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


async def _ask(ctx: RunContext, prompt: str, schema: Any, stage: str) -> Any:
    backend = ctx.cfg.backend
    return await ask_json(
        ctx.completer,
        prompt=prompt,
        schema=schema,
        stage=stage,
        timeout_s=backend.optimizer_timeout_s,
        max_output_tokens=backend.optimizer_max_output_tokens,
    )


# --------------------------------------------------------------------------- merge / rank


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
            reply = await _ask(ctx, prompt, MergeFullReply if full else MergeReply, "merge")
        except (ReplyFormatError, RetryableBackendError) as exc:
            ctx.note(stage="merge", level=level, error=str(exc))
            return None
        if full:
            source = side or SourceType.FAILURE
            return [c.as_edit(source) for c in reply.value.skill_candidates[:1]] or None
        edits: list[EditItem] = reply.value.edits
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
        reply = await _ask(ctx, prompt, RankReply, "rank")
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
        reply = await _ask(ctx, prompt, BudgetReply, "lr_autonomous")
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


async def consolidate_notes(ctx: RunContext, notes: Sequence[str]) -> list[str] | None:
    """A shorter appendix from the optimizer, or None (kept only if strictly shorter)."""
    prompt = render_prompt(
        "appendix_consolidate", n_notes=len(notes), notes="\n".join(f"- {n}" for n in notes)
    )
    try:
        reply = await _ask(ctx, prompt, ConsolidateReply, "appendix_consolidate")
    except (ReplyFormatError, RetryableBackendError) as exc:
        ctx.note(stage="appendix_consolidate", error=str(exc))
        return None
    compact = [n.strip() for n in reply.value.appendix_notes if n.strip()]
    if not compact or sum(map(len, compact)) >= sum(map(len, notes)):
        return None
    return compact


# --------------------------------------------------------------------------- update


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
        reply = await _ask(ctx, prompt, RewriteReply, "rewrite")
    except (ReplyFormatError, RetryableBackendError) as exc:
        ctx.note(stage="rewrite", error=str(exc))
        return None
    value: RewriteReply = reply.value
    return value


def failure_patterns(results: Sequence[RolloutResult]) -> list[dict[str, Any]]:
    """Failures grouped by fail-reason kind (text before the first ':') and task type; the
    labels come from the results themselves, never paired with analyst text by position."""
    groups = Counter(
        (r.reason.split(":", 1)[0].strip() or "unknown", r.task_type)
        for r in results
        if not r.passed
    )
    return [
        {"label": f"{kind} ({task_type})", "count": n}
        for (kind, task_type), n in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
