"""Epoch boundaries: longitudinal comparison, slow update (target guidance), meta skill."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from skillopt.concurrency import gather_indexed
from skillopt.gate import GateOutcome, paired_outcome, trainer_outcome
from skillopt.prompts import render_prompt
from skillopt.redact import sanitize
from skillopt.skilldoc import (
    extract_slow_update,
    inject_empty_slow_update,
    set_slow_update,
)
from skillopt.trainer.config import PairPolicy
from skillopt.trainer.core import TrainerCore
from skillopt.trainer.data import sample_train
from skillopt.trainer.envs.base import EnvItem, RolloutResult
from skillopt.trainer.paired_gate import compare_skills
from skillopt.trainer.persistence import RunState
from skillopt.trainer.replies import MetaSkillReply, SlowUpdateReply
from skillopt.trainer.rollouts import mean_scores, rollout
from skillopt.trainer.run_context import Sample, skill_hash
from skillopt.trainer.sample_ids import comparison_sample, slow_update_offset
from skillopt.trainer.slow_update import (
    ComparisonPair,
    build_pairs,
    filter_pairs,
    format_comparison,
)

__all__ = ["EpochEnd"]


class EpochEnd:
    """What happens after the last step of an epoch."""

    def __init__(self, core: TrainerCore) -> None:
        self.core = core

    async def close(self, state: RunState, epoch: int, last_step: int) -> RunState:
        core = self.core
        cfg, run = core.cfg, core.run_dir
        core.ctx.diagnostics = []
        pairs_json: list[dict[str, Any]] | None = None
        comparison = ""
        epoch_last_skill = run.read_text(state.current_skill_path)
        prev_skill = self._epoch_end_skill(epoch - 1)
        if epoch >= 2 and (cfg.optimizer.use_slow_update or cfg.optimizer.use_meta_skill):
            pairs = await self._comparison_pairs(epoch, prev_skill, epoch_last_skill)
            pairs_json = [p.to_json() for p in pairs]
            run.write_json(
                run.epoch_dir("slow_update", epoch) / "comparison_pairs.json", pairs_json
            )
            comparison = format_comparison(pairs)
        # The slow update and the meta skill read the same comparison: run them side by side.
        slow_state: list[RunState] = []
        memory: list[str] = []

        async def slow() -> None:
            slow_state.append(
                await self._slow_update(state, epoch, last_step, prev_skill, comparison)
            )

        async def meta() -> None:
            memory.append(
                await self._meta_skill(
                    state.meta_skill, epoch, prev_skill, epoch_last_skill, comparison
                )
            )

        async with anyio.create_task_group() as tg:
            if cfg.optimizer.use_slow_update:
                tg.start_soon(slow)
            if cfg.optimizer.use_meta_skill:
                tg.start_soon(meta)
        if slow_state:
            state = slow_state[0]
        if memory:
            state = state.model_copy(update={"meta_skill": memory[0]})
        end_path = state.current_skill_path
        state = state.model_copy(update={"epochs_closed": [*state.epochs_closed, epoch]})
        run.write_json(
            run.epoch_dir("epochs", epoch) / "epoch_end.json",
            {"skill": end_path, "diagnostics": core.ctx.sorted_diagnostics()},
        )
        run.save_state(state)
        return state

    async def _comparison_pairs(
        self, epoch: int, prev_skill: str, curr_skill: str
    ) -> list[ComparisonPair]:
        """Both skills on the same seeded sample of train items; with the ``changed`` policy,
        further chunks of the shuffled train split until enough changed pairs are found."""
        core = self.core
        cfg = core.cfg.optimizer
        edir = core.run_dir.epoch_dir("slow_update", epoch)
        seed = core.cfg.train.seed + epoch * 2000
        order = sample_train(core.train_ids, len(core.train_ids), seed)
        want = cfg.slow_update_samples
        pairs: list[ComparisonPair] = []
        chunk = 0
        while chunk * want < len(order):
            items = [core.items[i] for i in order[chunk * want : (chunk + 1) * want]]
            suffix = "" if chunk == 0 else f"/topup_{chunk:02d}"
            prev, curr = await self._roll_both(
                items, (prev_skill, curr_skill), edir, suffix, comparison_sample(epoch)
            )
            pairs.extend(filter_pairs(build_pairs(prev, curr), cfg.pair_policy))
            chunk += 1
            if cfg.pair_policy is not PairPolicy.CHANGED or len(pairs) >= want:
                break
        return pairs[:want] if cfg.pair_policy is PairPolicy.CHANGED else pairs

    async def _roll_both(
        self,
        items: list[EnvItem],
        skills: tuple[str, str],
        edir: Path,
        suffix: str,
        sample: Sample,
    ) -> tuple[list[RolloutResult], list[RolloutResult]]:
        """Both skills on ``items``, paired on one sample."""
        runs = (("prev", skills[0]), ("curr", skills[1]))

        async def roll(index: int) -> list[RolloutResult]:
            key, skill = runs[index]
            where = edir / f"rollout_{key}{suffix}"
            return await rollout(self.core.ctx, items, skill, where, sample)

        prev, curr = await gather_indexed(roll, len(runs))
        return prev, curr

    def _epoch_end_skill(self, epoch: int) -> str:
        run = self.core.run_dir
        if epoch <= 0:
            return run.read_text(run.skill_path(0))
        raw = run.read_json(run.epoch_dir("epochs", epoch) / "epoch_end.json")
        return run.read_text(str(raw["skill"]))

    async def _slow_update(
        self, state: RunState, epoch: int, last_step: int, prev_skill: str, comparison: str
    ) -> RunState:
        core = self.core
        run = core.run_dir
        edir = run.epoch_dir("slow_update", epoch)
        marker = edir / "slow_result.json"
        saved = run.read_json_opt(marker)
        if saved is not None:
            return state.model_copy(update=saved["state_update"])
        current = run.read_text(state.current_skill_path)
        result: dict[str, Any] = {"epoch": epoch}
        update: dict[str, Any] = {}
        if epoch == 1:
            injected = inject_empty_slow_update(current)
            run.write_text(edir / "skill.md", injected)
            update = {
                "current_skill_path": run.rel(edir / "skill.md"),
                "current_origin": "slow_update_placeholder_epoch_01",
            }
            result["action"] = "inject_placeholder"
        else:
            prompt = render_prompt(
                "slow_update",
                previous_skill=prev_skill.strip() or "(empty)",
                current_skill=current.strip() or "(empty)",
                previous_guidance=extract_slow_update(current) or "(first slow update)",
                comparison=comparison or "(no comparison pairs)",
            )
            content = await core.ask_optional(prompt, SlowUpdateReply, "slow_update")
            if content is None:  # the call failed; the reason is in the diagnostics
                result["action"] = "failed"
            elif not content.slow_update_content.strip():
                result["action"] = "no_content"
            else:
                state, gated, update = await self._gate_guidance(
                    state, epoch, last_step, current, content.slow_update_content
                )
                result.update(gated)
        result["state_update"] = update
        run.write_json(marker, result)
        state = state.model_copy(update=update)
        run.save_state(state)
        return state

    async def _gate_guidance(
        self, state: RunState, epoch: int, last_step: int, current: str, guidance: str
    ) -> tuple[RunState, dict[str, Any], dict[str, Any]]:
        """Validate the skill carrying new guidance; returns the state with its val scores
        cached, the result fields and the state update the gate allows. Gated, the decision
        is the steps' paired one (fresh paired val samples against the skill in place);
        ungated, the guidance is forced in and its val scores only recorded."""
        core = self.core
        run = core.run_dir
        edir = run.epoch_dir("slow_update", epoch)
        candidate = sanitize(set_slow_update(current, guidance))
        run.write_text(edir / "candidate_skill.md", candidate)
        gated = core.cfg.optimizer.slow_update_gated
        result: dict[str, Any] = {"guidance": guidance, "candidate_hash": skill_hash(candidate)}
        if gated and skill_hash(candidate) != skill_hash(current):
            offset = slow_update_offset(epoch)
            gate_dir = edir / "gate"
            comparison = await compare_skills(core, current, candidate, gate_dir, offset=offset)
            hard, soft = mean_scores(comparison.candidate_results)
            cache = {**state.selection_cache, skill_hash(candidate): (hard, soft)}
            state = state.model_copy(update={"selection_cache": cache})
            score = comparison.decision.candidate
            outcome: GateOutcome = paired_outcome(comparison.decision)
            result["gate"] = comparison.record()
        else:
            state, hard, soft, _ = await core.validate(state, candidate, edir / "selection_eval")
            score = core.score(hard, soft)
            outcome = trainer_outcome(
                candidate=score, current=state.current_score, best=state.best_score, use_gate=gated
            )
        result.update(
            selection_hard=hard,
            selection_soft=soft,
            candidate_gate_score=score,
            action=outcome.action.value,
        )
        update: dict[str, Any] = {}
        if outcome.becomes_current:
            run.write_text(edir / "skill.md", candidate)
            update = {
                "current_skill_path": run.rel(edir / "skill.md"),
                "current_score": score,
                "current_origin": f"slow_update_epoch_{epoch:02d}",
            }
        # Best never takes force-injected guidance; a gated acceptance may.
        if gated and outcome.becomes_best:
            update.update(
                best_score=score,
                best_step=last_step,
                best_origin=f"slow_update_epoch_{epoch:02d}",
                best_skill_path=run.rel(edir / "candidate_skill.md"),
            )
        return state, result, update

    async def _meta_skill(
        self, memory: str, epoch: int, prev_skill: str, curr_skill: str, comparison: str
    ) -> str:
        """The optimizer's memory for the next epoch (``memory`` when nothing new)."""
        run = self.core.run_dir
        marker = run.epoch_dir("meta_skill", epoch) / "meta_skill_result.json"
        saved = run.read_json_opt(marker)
        if saved is not None:
            return str(saved.get("meta_skill_content", ""))
        if epoch == 1:
            run.write_json(marker, {"action": "skip_first_epoch", "meta_skill_content": memory})
            return memory
        prompt = render_prompt(
            "meta_skill",
            previous_skill=prev_skill.strip() or "(empty)",
            current_skill=curr_skill.strip() or "(empty)",
            previous_memory=memory or "(none)",
            comparison=comparison or "(no comparison pairs)",
        )
        reply = await self.core.ask_optional(prompt, MetaSkillReply, "meta_skill")
        content = reply.meta_skill_content.strip() if reply is not None else ""
        run.write_json(
            marker,
            {
                "action": "failed"
                if reply is None
                else ("write_meta_skill" if content else "no_content"),
                "meta_skill_content": content or memory,
            },
        )
        return content or memory
