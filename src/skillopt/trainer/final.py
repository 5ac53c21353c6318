"""The final phase: validate the final skill (promote it if better), test evaluation, summary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skillopt.concurrency import gather_indexed
from skillopt.errors import RunFailedError
from skillopt.logging import get_logger
from skillopt.trainer.core import TrainerCore
from skillopt.trainer.envs.base import RolloutResult
from skillopt.trainer.paired_gate import FINAL_SAMPLES, compare_skills
from skillopt.trainer.persistence import RunState
from skillopt.trainer.rollouts import mean_scores, rollout
from skillopt.trainer.run_context import skill_hash
from skillopt.types import GateAction

__all__ = ["VERSION", "FinalPhase"]

VERSION = "skillopt-trainer-1"
_log = get_logger(__name__)


class FinalPhase:
    """After the last epoch."""

    def __init__(self, core: TrainerCore) -> None:
        self.core = core

    async def finish(
        self,
        state: RunState,
        history: list[dict[str, Any]],
        *,
        failure: RunFailedError | None = None,
    ) -> dict[str, Any]:
        """Final validation (promotion) and test; writes and returns the summary, which
        names the failed stage when the run failed."""
        core = self.core
        cfg, run = core.cfg, core.run_dir
        current = run.read_text(state.current_skill_path)
        best = run.read_text(state.best_skill_path)
        final_hard: float | None = None
        final_soft: float | None = None
        if skill_hash(current) == skill_hash(best):
            cached = state.selection_cache.get(skill_hash(best))
            if cached is not None:
                final_hard, final_soft = cached
        elif cfg.gate.gated:
            state, final_hard, final_soft, promoted = await self._paired_promotion(
                state, best, current
            )
            if promoted:
                best = current
        else:
            state, final_hard, final_soft, _ = await core.validate(
                state, current, run.root / "final_selection_eval"
            )
            final_score = core.score(final_hard, final_soft)
            if final_score > state.best_score:
                state = state.model_copy(
                    update={
                        "best_score": final_score,
                        "best_step": state.last_completed_step,
                        "best_origin": state.current_origin,
                        "best_skill_path": state.current_skill_path,
                    },
                )
                best = current
        run.save_state(state)
        summary: dict[str, Any] = {
            "version": VERSION,
            "config": core.config_dump()["config"],
            "plan": core.plan_dict(),
            "baseline_selection_hard": state.selection_cache.get(state.baseline_hash, (None,))[0],
            "baseline_gate_score": state.baseline_score,
            "best_gate_score": state.best_score,
            "best_selection_hard": state.selection_cache.get(skill_hash(best), (None,))[0],
            "final_selection_hard": final_hard,
            "final_selection_soft": final_soft,
            "best_step": state.best_step,
            "current_origin": state.current_origin,
            "best_origin": state.best_origin,
            **_count_actions(history),
            "epoch_stats": _epoch_stats(history),
            "token_summary": core.ctx.completer.snapshot(),
        }
        if cfg.evaluation.eval_test:
            summary.update(await self._test_phase(best, current))
        summary["token_summary"] = core.ctx.completer.snapshot()
        if failure is not None:
            summary.update(status="failed", failed_stage=failure.stage, reason=failure.cause)
        run.write_json(run.root / "summary.json", summary)
        _log.info(
            "run_done",
            steps=summary["total_steps"],
            accepts=summary["total_accepts"],
            rejects=summary["total_rejects"],
            best_gate_score=state.best_score,
        )
        return summary

    async def _paired_promotion(
        self, state: RunState, best: str, current: str
    ) -> tuple[RunState, float, float, bool]:
        """The final skill replaces the best only when the paired gate says it is better
        (fresh samples of both on every val item); the decision is kept in the run dir."""
        core = self.core
        run = core.run_dir
        comparison = await compare_skills(
            core, best, current, run.root / "final_gate", offset=FINAL_SAMPLES
        )
        hard, soft = mean_scores(comparison.candidate_results)
        promoted = comparison.decision.accepted
        run.write_json(
            run.root / "final_gate" / "decision.json",
            {"promoted": promoted, "gate": comparison.record()},
        )
        if promoted:
            state = state.model_copy(
                update={
                    "best_score": comparison.decision.candidate,
                    "best_step": state.last_completed_step,
                    "best_origin": state.current_origin,
                    "best_skill_path": state.current_skill_path,
                },
            )
        return state, hard, soft, promoted

    async def _test_phase(self, best: str, final: str) -> dict[str, Any]:
        """Test scores of the initial, best and final skills; distinct skills run at once,
        a skill equal to an earlier one reuses its results."""
        core = self.core
        run = core.run_dir
        init = run.read_text(run.skill_path(0))
        plan = (
            ("baseline", init, "test_eval_baseline"),
            ("best", best, "test_eval"),
            ("final", final, "test_eval_final"),
        )
        distinct: dict[str, tuple[str, str]] = {}  # digest -> (skill, first dirname)
        for _, skill, dirname in plan:
            distinct.setdefault(skill_hash(skill), (skill, dirname))
        jobs = list(distinct.values())

        async def evaluate(index: int) -> list[RolloutResult]:
            skill, dirname = jobs[index]
            results = await rollout(core.ctx, core.test, skill, run.root / dirname)
            run.write_json(run.root / dirname / "summary.json", self._per_type(results))
            return results

        done = await gather_indexed(evaluate, len(jobs))
        scored = dict(zip(distinct, done, strict=True))
        out: dict[str, Any] = {}
        for label, skill, _ in plan:
            hard, soft = mean_scores(scored[skill_hash(skill)])
            key = "test" if label == "best" else f"{label}_test"
            out[f"{key}_hard"], out[f"{key}_soft"] = hard, soft
        out["test_delta_hard"] = out["test_hard"] - out["baseline_test_hard"]
        out["final_test_delta_hard"] = out["final_test_hard"] - out["baseline_test_hard"]
        return out

    def _per_type(self, results: Sequence[RolloutResult]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for task_type in [*self.core.env.task_types(), "overall"]:
            chosen = [r for r in results if task_type in ("overall", r.task_type)]
            hard, soft = mean_scores(chosen)
            out[task_type] = {"total": len(chosen), "hard_acc": hard, "soft": soft}
        return out


def _count_actions(history: Sequence[dict[str, Any]]) -> dict[str, int]:
    actions = [str(h.get("action", "")) for h in history]
    return {
        "total_steps": len(history),
        "total_accepts": sum(a in (GateAction.ACCEPT, GateAction.ACCEPT_NEW_BEST) for a in actions),
        "total_force_accepts": sum(a == GateAction.FORCE_ACCEPT for a in actions),
        "total_rejects": sum(a == GateAction.REJECT for a in actions),
        "total_skips": sum(a.startswith("skip_") for a in actions),
    }


def _epoch_stats(history: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    stats: list[dict[str, Any]] = []
    for epoch in sorted({int(h["epoch"]) for h in history}):
        rows = [h for h in history if int(h["epoch"]) == epoch]
        stats.append(
            {
                "epoch": epoch,
                **_count_actions(rows),
                "best_score_at_epoch_end": rows[-1]["best_score"],
                "current_score_at_epoch_end": rows[-1]["current_score"],
            },
        )
    return stats
