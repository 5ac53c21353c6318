"""The ReflACT training loop: baseline, epochs of gated steps, epoch boundaries, final phase.

A step is rollout -> reflect -> merge -> select -> update -> evaluate, with accumulation
micro-batches rolled out and analysed concurrently. After every step the run directory holds
everything needed to continue; :meth:`Trainer.run` on an existing directory resumes after the
last completed step and redoes a partly done step from its saved rollouts and patches.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skillopt.concurrency import gather_indexed
from skillopt.errors import (
    ConfigError,
    CorruptStateError,
    SkillOptError,
)
from skillopt.logging import get_logger
from skillopt.optimizer.meta import meta_context
from skillopt.redact import sanitize
from skillopt.skilldoc import (
    Region,
    append_notes,
    appendix_notes,
    extract_slow_update,
    region_spans,
    set_slow_update,
    strip_region,
)
from skillopt.trainer.config import LrControl, UpdateMode
from skillopt.trainer.data import plan_train_epoch
from skillopt.trainer.envs.base import RolloutResult
from skillopt.trainer.epoch_end import EpochEnd
from skillopt.trainer.final import FinalPhase
from skillopt.trainer.gating import decide, scheduled_budget
from skillopt.trainer.persistence import RunState, StepBufferEntry
from skillopt.trainer.steps import (
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
from skillopt.types import GateAction

__all__ = ["Trainer"]

_log = get_logger("skillopt.trainer")


class Trainer(EpochEnd, FinalPhase):
    """One training run over ``env`` into ``cfg.out_root``: resumes when the directory holds
    an earlier run of the same plan."""

    # ------------------------------------------------------------------ start / resume

    async def _start(self) -> tuple[RunState, list[dict[str, Any]]]:
        run = self.run_dir
        run.prepare()
        state = run.load_state()
        history = run.load_history()
        if state is None:
            if history:
                raise CorruptStateError(
                    str(run.state_path), "missing while history.json exists; refusing to restart"
                )
            init = sanitize(self._read_skill_init())
            run.write_text(run.skill_path(0), init)
            run.write_json(run.root / "config.json", self._config_dump())
            _log.info("baseline_start", n_val=len(self._val))
            self._phase(f"baseline on {len(self._val)} val items")
            hard, soft = mean_scores(
                await rollout(self.ctx, self._val, init, run.root / "selection_eval_baseline")
            )
            score = self._score(hard, soft)
            digest = skill_hash(init)
            state = RunState(
                total_steps=self.plan.total_steps,
                current_skill_path=run.rel(run.skill_path(0)),
                best_skill_path=run.rel(run.skill_path(0)),
                current_score=score,
                best_score=score,
                baseline_hash=digest,
                baseline_score=score,
                selection_cache={digest: (hard, soft)},
            )
            run.save_state(state)
            _log.info("baseline_done", hard=hard, soft=soft, score=score)
            return state, []
        self._check_resumable()
        run.publish_best(state)  # heal a copy left behind by a crash between writes
        history = [h for h in history if int(h.get("step", 0)) <= state.last_completed_step]
        _log.info("resume", last_completed_step=state.last_completed_step)
        return state, history

    def _check_resumable(self) -> None:
        """A resumed run must cut its epochs the same way (more epochs are fine)."""
        path = self.run_dir.root / "config.json"
        saved = self.run_dir.read_json(path)
        try:
            old_train = saved["config"]["train"]
            old_plan = saved["plan"]
        except (KeyError, TypeError) as exc:
            raise CorruptStateError(str(path), "missing config or plan") from exc
        train = self.cfg.train
        for key in ("batch_size", "accumulation", "seed"):
            if old_train.get(key) != getattr(train, key):
                raise ConfigError(
                    f"was {old_train.get(key)!r} when the run started, now "
                    f"{getattr(train, key)!r}; use a new out_root to change it",
                    key=f"train.{key}",
                )
        if old_plan.get("train_size") != self.plan.train_size:
            raise ConfigError(
                f"the train split had {old_plan.get('train_size')} items when the run "
                f"started, now {self.plan.train_size}",
                key="env.data_dir",
            )

    # ------------------------------------------------------------------ run

    async def run(self) -> dict[str, Any]:
        """Train (or resume) to the end; returns the summary also written to summary.json.

        A failure inside concurrent stages surfaces as the underlying SkillOptError rather
        than an exception group, so callers catch our own types only."""
        try:
            return await self._run()
        except BaseExceptionGroup as group:
            leaf = _first_leaf(group)
            if isinstance(leaf, SkillOptError):
                raise leaf from group
            raise
        finally:
            if self.progress is not None:
                self.progress.close()

    async def _run(self) -> dict[str, Any]:
        t_start = time.monotonic()
        state, history = await self._start()
        cfg = self.cfg
        global_step = 0
        for epoch in range(1, cfg.train.num_epochs + 1):
            if epoch > state.step_buffer_epoch:
                state = state.model_copy(update={"step_buffer": [], "step_buffer_epoch": epoch})
            batches = plan_train_epoch(
                self._train_ids,
                epoch=epoch,
                batch_size=cfg.train.batch_size,
                batches=self.plan.batches_per_epoch,
                seed=cfg.train.seed,
            )
            for step_in_epoch in range(self.plan.steps_per_epoch):
                global_step += 1
                if global_step <= state.last_completed_step:
                    continue
                acc = cfg.train.accumulation
                micro = batches[step_in_epoch * acc : (step_in_epoch + 1) * acc]
                total = state.total_steps
                self._phase(f"step {global_step}/{total} epoch {epoch}")
                state, record = await self._step(state, global_step, epoch, step_in_epoch, micro)
                history.append(record)
                self._persist_step(state, history, record)
                _log.info(
                    "step_done",
                    step=global_step,
                    action=record["action"],
                    current_score=state.current_score,
                    best_score=state.best_score,
                )
                if self.progress is not None:
                    self.progress.line(
                        f"step {global_step}/{total}: {record['action']}, val gate "
                        f"{state.current_score:.3f} (best {state.best_score:.3f})"
                    )
            if epoch not in state.epochs_closed:
                self._phase(f"end of epoch {epoch}")
                state = await self._close_epoch(state, epoch, global_step)
        self._phase("final validation and test")
        summary = await self._finish(state, history)
        self._timing["total_wall_time_s"] = round(time.monotonic() - t_start, 3)
        if self._pool_accounting is not None:
            self._timing["pool_accounting"] = self._pool_accounting()
        self.run_dir.write_json(self.run_dir.root / "timing.json", self._timing)
        return summary

    # ------------------------------------------------------------------ one step

    async def _step(
        self,
        state: RunState,
        step: int,
        epoch: int,
        step_in_epoch: int,
        micro: Sequence[Any],
    ) -> tuple[RunState, dict[str, Any]]:
        cfg, run = self.cfg, self.run_dir
        step_dir = run.step_dir(step)
        current = run.read_text(state.current_skill_path)
        tokens_before = self.ctx.completer.snapshot()
        self.ctx.diagnostics = []
        timing: dict[str, float] = {}
        t0 = time.monotonic()
        _log.info("step_start", step=step, epoch=epoch)

        def bdir(a: int) -> Path:
            return step_dir if len(micro) == 1 else step_dir / f"batch_{a}"

        # (1) rollout, all micro-batches at once

        async def roll(a: int) -> list[RolloutResult]:
            items = [self._items[i] for i in micro[a].item_ids]
            return await rollout(self.ctx, items, current, bdir(a) / "rollout")

        per_batch = await gather_indexed(roll, len(micro))
        results = [r for batch in per_batch for r in batch]
        r_hard, r_soft = mean_scores(results)
        timing["rollout_s"] = time.monotonic() - t0

        # (2) reflect, all micro-batches at once
        t1 = time.monotonic()
        buffer_text = format_step_buffer(state.step_buffer)
        meta_text = meta_context(state.meta_skill)

        async def reflect(a: int) -> list[Patch]:
            return await analyse(
                self.ctx,
                per_batch[a],
                skill=current,
                patches_dir=bdir(a) / "patches",
                seed=micro[a].seed,
                step_buffer=buffer_text,
                meta_skill=meta_text,
            )

        per_patches = await gather_indexed(reflect, len(micro))
        patches = [p for batch in per_patches for p in batch]
        timing["reflect_s"] = time.monotonic() - t1
        n_fail_p = sum(1 for p in patches if p.side.value == "failure" and p.edits)
        n_succ_p = sum(1 for p in patches if p.side.value == "success" and p.edits)
        record: dict[str, Any] = {
            "step": step,
            "epoch": epoch,
            "step_in_epoch": step_in_epoch,
            "rollout_hard": r_hard,
            "rollout_soft": r_soft,
            "rollout_n": len(results),
            "accumulation_batches": [
                {
                    "batch_idx": b.index,
                    "batch_seed": b.seed,
                    "n_envs": len(b.item_ids),
                    "hard": mean_scores(per_batch[a])[0],
                    "soft": mean_scores(per_batch[a])[1],
                    "n_failure_patches": sum(
                        1 for p in per_patches[a] if p.side.value == "failure" and p.edits
                    ),
                    "n_success_patches": sum(
                        1 for p in per_patches[a] if p.side.value == "success" and p.edits
                    ),
                }
                for a, b in enumerate(micro)
            ],
            "n_patches": n_fail_p + n_succ_p,
            "n_failure_patches": n_fail_p,
            "n_success_patches": n_succ_p,
        }
        fail_patterns = failure_patterns(results)
        notes = [note for p in patches for note in p.notes]
        if not any(p.edits for p in patches) and not notes:
            return self._skip(state, record, "skip_no_patches", current, tokens_before, timing)

        # (3) merge
        t2 = time.monotonic()
        merged = await merge_patches(self.ctx, patches, skill=current, meta_skill=meta_text)
        run.write_json(
            step_dir / "merged_patch.json",
            {
                "edits": [e.model_dump(mode="json") for e in merged.edits],
                "merge_calls": merged.calls,
                "merge_depth": merged.depth,
                "fallbacks": merged.fallbacks,
            },
        )
        timing["aggregate_s"] = time.monotonic() - t2

        # (4) select
        t3 = time.monotonic()
        full = cfg.optimizer.update_mode is UpdateMode.FULL_REWRITE
        budget: int | None = None
        lr_decision: dict[str, Any] | None = None
        if full:  # whole-skill candidates are not ranked: the merged one is used
            ranked = list(merged.edits)
            rank_info: dict[str, Any] = {"ranked_by": "none_full_rewrite", "n_items": len(ranked)}
        else:
            budget = scheduled_budget(
                cfg.optimizer.lr_scheduler,
                max_edits=cfg.optimizer.learning_rate,
                min_edits=cfg.optimizer.min_learning_rate,
                step=step,
                total_steps=state.total_steps,
            )
            if cfg.optimizer.lr_control is LrControl.AUTONOMOUS:
                evidence = (
                    f"{len(results)} attempts this step: hard {r_hard:.3f}, soft {r_soft:.3f}; "
                    f"{len(merged.edits)} proposed edits after merging"
                )
                budget, lr_decision = await autonomous_budget(
                    self.ctx,
                    merged.edits,
                    fallback=budget,
                    skill=current,
                    evidence=evidence,
                    step_buffer=buffer_text,
                    meta_skill=meta_text,
                    decision_path=step_dir / "lr_decision.json",
                )
            ranked, rank_info = await rank_edits(
                self.ctx, merged.edits, budget=budget, skill=current, meta_skill=meta_text
            )
        run.write_json(
            step_dir / "ranked_edits.json",
            {"edits": [e.model_dump(mode="json") for e in ranked], **rank_info},
        )
        timing["select_s"] = time.monotonic() - t3
        record.update(
            n_edits_merged=len(merged.edits),
            n_edits_ranked=len(ranked),
            edit_budget=budget,
            lr_control_mode="none" if full else cfg.optimizer.lr_control.value,
            support_counts=[e.support_count for e in ranked],
        )
        if lr_decision is not None:
            record["lr_decision"] = lr_decision

        # (5) update
        t4 = time.monotonic()
        if cfg.optimizer.update_mode is UpdateMode.PATCH:
            candidate, rows = update_patch(current, ranked)
            run.write_json(step_dir / "edit_apply_report.json", rows)
            record["edit_apply_summary"] = {
                "total": len(rows),
                "applied": sum(1 for r in rows if r["status"] == "applied"),
                "skipped": sum(1 for r in rows if r["status"] != "applied"),
                "errors": 0,
            }
        elif full:
            chosen = next((e for e in ranked if e.content.strip()), None)
            if chosen is None:
                return self._skip(state, record, "skip_no_rewrite", current, tokens_before, timing)
            candidate = _carry_protected(current, chosen.content)
            run.write_json(step_dir / "full_rewrite_result.json", chosen.model_dump(mode="json"))
            record["full_rewrite_title"] = chosen.target
        else:
            rewrite = await rewrite_skill(self.ctx, current, ranked, step_buffer=buffer_text)
            if rewrite is None:
                return self._skip(state, record, "skip_no_rewrite", current, tokens_before, timing)
            run.write_json(step_dir / "rewrite_result.json", rewrite.model_dump(mode="json"))
            candidate = _carry_protected(current, rewrite.new_skill)
            record["rewrite_change_summary"] = rewrite.change_summary
        if notes:
            # Execution-lapse reminders join the candidate *before* the gate, so the skill
            # that carries them is validated like any other change.
            with_notes = append_notes(candidate, notes)
            record["n_appendix_notes_added"] = len(appendix_notes(with_notes)) - len(
                appendix_notes(candidate)
            )
            candidate = with_notes
            threshold = cfg.reflect.consolidate_threshold
            if threshold and len(appendix_notes(candidate)) > threshold:
                compact = await consolidate_notes(self.ctx, appendix_notes(candidate))
                if compact is not None:
                    candidate = append_notes(strip_region(candidate, Region.APPENDIX), compact)
                record["appendix_consolidated"] = compact is not None
        # Files hold sanitized text; the in-memory skill must be the same bytes (hashes, resume).
        candidate = sanitize(candidate)
        run.write_text(step_dir / "candidate_skill.md", candidate)
        timing["update_s"] = time.monotonic() - t4
        record.update(candidate_hash=skill_hash(candidate), candidate_skill_len=len(candidate))

        # (6) evaluate and gate
        t5 = time.monotonic()
        state, hard, soft, cached = await self._validate(
            state, candidate, step_dir / "selection_eval"
        )
        cand_score = self._score(hard, soft)
        outcome = decide(
            candidate=cand_score,
            current=state.current_score,
            best=state.best_score,
            use_gate=cfg.evaluation.use_gate,
        )
        timing["evaluate_s"] = time.monotonic() - t5
        score_before = state.current_score
        update: dict[str, Any] = {}
        if outcome.becomes_current:
            update.update(
                current_skill_path=run.rel(run.skill_path(step)),
                current_score=cand_score,
                current_origin=f"step_{step:04d}",
            )
        if outcome.becomes_best:
            update.update(
                best_score=cand_score,
                best_step=step,
                best_origin=f"step_{step:04d}",
                best_skill_path=run.rel(step_dir / "candidate_skill.md"),
            )
        new_current = candidate if outcome.becomes_current else current
        entry = StepBufferEntry(
            step=step,
            action=outcome.action.value,
            n_total=len(results),
            n_fail=sum(1 for r in results if not r.passed),
            failure_patterns=fail_patterns,
            score_before=score_before if outcome.action is GateAction.REJECT else None,
            score_after=cand_score if outcome.action is GateAction.REJECT else None,
            rejected_edits=[e.summary() for e in ranked]
            if outcome.action is GateAction.REJECT
            else [],
        )
        update["step_buffer"] = [*state.step_buffer, entry]
        update["step_buffer_epoch"] = epoch
        update["last_completed_step"] = step
        state = state.model_copy(update=update)
        run.write_json(step_dir / "trajectory_digest.json", entry.model_dump(mode="json"))
        run.write_text(run.skill_path(step), new_current)
        record.update(
            selection_hard=hard,
            selection_soft=soft,
            selection_cached=cached,
            gate_metric=cfg.evaluation.gate_metric.value,
            candidate_gate_score=cand_score,
            action=outcome.action.value,
            gate=outcome.decision.arithmetic,
        )
        return state, self._finish_record(state, record, new_current, tokens_before, timing)

    def _finish_record(
        self,
        state: RunState,
        record: dict[str, Any],
        skill: str,
        tokens_before: dict[str, dict[str, int]],
        timing: dict[str, float],
    ) -> dict[str, Any]:
        record.update(
            current_score=state.current_score,
            best_score=state.best_score,
            best_step=state.best_step,
            current_origin=state.current_origin,
            best_origin=state.best_origin,
            skill_len=len(skill),
            tokens=StageCounter.delta(tokens_before, self.ctx.completer.snapshot()),
            diagnostics=self.ctx.sorted_diagnostics(),
        )
        self._timing["steps"][str(record["step"])] = {k: round(v, 3) for k, v in timing.items()}
        return record

    def _skip(
        self,
        state: RunState,
        record: dict[str, Any],
        action: str,
        current: str,
        tokens_before: dict[str, dict[str, int]],
        timing: dict[str, float],
    ) -> tuple[RunState, dict[str, Any]]:
        step = int(record["step"])
        record["action"] = action
        state = state.model_copy(update={"last_completed_step": step})
        self.run_dir.write_text(self.run_dir.skill_path(step), current)
        return state, self._finish_record(state, record, current, tokens_before, timing)

    def _persist_step(
        self, state: RunState, history: list[dict[str, Any]], record: dict[str, Any]
    ) -> None:
        run = self.run_dir
        run.save_history(history)
        run.save_state(state)
        step_dir = run.step_dir(int(record["step"]))
        run.write_json(step_dir / "step_record.json", record)
        run.write_json(step_dir / "timing.json", self._timing["steps"][str(record["step"])])


def _carry_protected(current: str, new: str) -> str:
    """A rewritten skill keeps the current appendix and slow-update blocks verbatim."""
    new = strip_region(strip_region(new, Region.APPENDIX), Region.SLOW_UPDATE)
    notes = appendix_notes(current)
    if notes:
        new = append_notes(new, notes)
    if region_spans(current, Region.SLOW_UPDATE):
        new = set_slow_update(new, extract_slow_update(current))
    return new


def _first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error
