"""Rolling a skill out on items: the one way the trainer attempts items.

A step's rollout stage (:mod:`skillopt.trainer.step.rollout`), validation, the gate's
paired samples, the epoch ends and the final test all call :func:`rollout`. Fan-out uses a
task group and places results by index; each finished row is journaled to
``results.partial.jsonl`` as it lands, so a killed run redoes only what is missing; the
ordered ``results.json`` replaces it at the end.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from skillopt.atomicio import AppendJournal, read_jsonl
from skillopt.concurrency import gather_indexed
from skillopt.errors import BackendError, FatalBackendError
from skillopt.redact import redact_obj
from skillopt.trainer.envs.base import (
    EnvItem,
    RolloutContext,
    RolloutResult,
    rollout_from_json,
    rollout_to_json,
)
from skillopt.trainer.persistence import RunDir
from skillopt.trainer.run_context import RunContext, Sample, skill_hash
from skillopt.trainer.scorers.base import unscored

__all__ = ["failure_patterns", "mean_scores", "rollout"]


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
    sample: Sample = Sample(),  # noqa: B008 (frozen)
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
    _check_batch(ctx, final, out_dir)
    rows = [rollout_to_json(r) for r in final]
    ctx.run.write_json(final_path, {"skill_hash": digest, "results": rows})
    partial_path.unlink(missing_ok=True)
    return final


def _check_batch(ctx: RunContext, final: Sequence[RolloutResult], out_dir: Path) -> None:
    """A batch whose calls mostly failed is refused (:class:`BackendError`). Answers the
    judge could not score are untested samples, not failed calls: noted as a diagnostic
    (the row keeps the judge's reply and why it was unusable) and scored as errors."""
    errors = sum(1 for r in final if r.error and not unscored(r))
    if final and errors * 2 > len(final):
        raise BackendError(
            f"{errors}/{len(final)} rollouts failed in {ctx.run.rel(out_dir)}; "
            "refusing to score a mostly broken batch"
        )
    untested = [r for r in final if unscored(r)]
    if untested:
        ctx.note(
            stage="judge",
            file=ctx.run.rel(out_dir / "results.json"),
            items=[r.task_id for r in untested],
            error=untested[0].error,
        )


def mean_scores(results: Sequence[RolloutResult]) -> tuple[float, float]:
    """Exact means (``math.fsum``): the gate compares them strictly, so the same scores in
    another order must tie, not win by rounding noise."""
    if not results:
        return 0.0, 0.0
    n = len(results)
    return math.fsum(r.hard for r in results) / n, math.fsum(r.soft for r in results) / n


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
