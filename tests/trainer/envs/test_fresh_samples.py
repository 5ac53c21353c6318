"""Every bundled environment honours the gate's fresh samples: a rollout asked for one
(``RolloutContext.use_cache = False``) sends its call past the response cache, under the
sample id it was given."""

from __future__ import annotations

from pathlib import Path

import pytest

from skillopt.backends.base import CompletionRequest
from skillopt.trainer.build import build_environment
from skillopt.trainer.config import load_trainer_config
from skillopt.trainer.envs.base import RolloutContext
from skillopt.types import Split
from support.trainer_fakes import ScriptedBackend, pool_of

REPO = Path(__file__).resolve().parents[3]


def judge_or_answer(request: CompletionRequest) -> str:
    return '{"score": 1.0, "reason": "ok"}' if request.stage != "rollout" else "<answer>A</answer>"


@pytest.mark.parametrize(
    "demo", ["qa_demo.toml", "mcq_demo.toml", "rubric_demo.toml", "exec_check_demo.toml"]
)
async def test_a_fresh_sample_bypasses_the_cache(tmp_path: Path, demo: str) -> None:
    env = build_environment(load_trainer_config(REPO / "configs/trainer" / demo))
    backend = ScriptedBackend(reply=judge_or_answer)
    ctx = RolloutContext(completer=pool_of(backend), timeout_s=10, max_output_tokens=64,
                         workdir=tmp_path / "w", sample_id=7, use_cache=False)  # fmt: skip
    await env.rollout(env.items(Split.VAL)[0], "", ctx)
    rollouts = [r for r in backend.requests if r.stage == "rollout"]
    assert rollouts and all(not r.use_cache and r.sample_id == 7 for r in rollouts)
