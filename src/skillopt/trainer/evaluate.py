"""Score one skill on one split (``skillopt eval``), reusing the trainer's rollout stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skillopt.backends.wrappers import StageCounter
from skillopt.trainer.config import TrainerConfig
from skillopt.trainer.envs.base import Completer, Environment
from skillopt.trainer.persistence import RunDir
from skillopt.trainer.rollouts import mean_scores, rollout
from skillopt.trainer.run_context import RunContext, skill_hash
from skillopt.types import Split

__all__ = ["evaluate_skill"]


async def evaluate_skill(
    cfg: TrainerConfig,
    env: Environment,
    completer: Completer,
    skill: str,
    split: Split,
    out_dir: Path,
) -> dict[str, Any]:
    """Mean hard/soft and per-task-type accuracy of ``skill`` on ``split``."""
    run = RunDir(out_dir)
    run.prepare()
    ctx = RunContext(
        cfg=cfg,
        env=env,
        completer=StageCounter(completer),
        run=run,
    )
    env_num = cfg.evaluation.test_env_num if split is Split.TEST else cfg.evaluation.sel_env_num
    items = list(env.items(split))
    if env_num and split is not Split.TRAIN:
        items = items[:env_num]
    results = await rollout(ctx, items, skill, out_dir / f"eval_{split.value}")
    hard, soft = mean_scores(results)
    per_type: dict[str, Any] = {}
    for task_type in env.task_types():
        chosen = [r for r in results if r.task_type == task_type]
        if chosen:
            per_type[task_type] = {"total": len(chosen), "hard_acc": mean_scores(chosen)[0]}
    return {
        "split": split.value,
        "skill_hash": skill_hash(skill),
        "n": len(results),
        "hard": hard,
        "soft": soft,
        "errors": sum(1 for r in results if r.error),
        "per_task_type": per_type,
    }
