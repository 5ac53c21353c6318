"""The exec environment: QA items answered by an agent CLI (a fake codex executable)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt.errors import ConfigError
from skillopt.trainer.build import open_environment
from skillopt.trainer.config import load_trainer_config
from skillopt.trainer.demo import DemoWorld
from skillopt.trainer.envs.base import RolloutContext
from skillopt.trainer.loop import Trainer
from skillopt.types import Split
from support.fake_cli import codex_events, write_fake_cli
from support.trainer_fakes import pool_of

REPO = Path(__file__).resolve().parents[3]


def exec_cfg(tmp_path: Path, *extra: str) -> object:
    fake = write_fake_cli(
        tmp_path / "bin",
        "codex",
        stdout=codex_events("yes"),
        last_message=json.dumps({"final_response": "<answer>yes</answer>", "final_answer": "yes"}),
    )
    pool_toml = tmp_path / "pool.toml"
    pool_toml.write_text(
        f"""
[[members]]
kind = "codex"
name = "agent"
executable = "{fake.path}"
max_concurrency = 4
timeout = 30

[roles]
target = ["agent"]
optimizer = ["agent"]
"""
    )
    return load_trainer_config(
        REPO / "configs/trainer/qa_demo.toml",
        overrides=[
            f"out_root={json.dumps(str(tmp_path / 'run'))}",
            "env.name=qa_exec",
            "env.exec_member=agent",
            "env.limit=6",
            f"backend.pool_config={json.dumps(str(pool_toml))}",
            "train.batch_size=6",
            "train.num_epochs=1",
            *extra,
        ],
    ), fake


async def test_exec_rollout_installs_the_skill_and_scores_the_answer(tmp_path: Path) -> None:
    cfg, fake = exec_cfg(tmp_path, "env.keep_workspace=true", "env.limit=0")
    async with open_environment(cfg) as env:  # type: ignore[arg-type]
        items = [i for i in env.items(Split.TRAIN) if i.data["answers"] == ["yes"]][:1]
        items += [i for i in env.items(Split.TRAIN) if i.task_type == "count"][:1]
        assert len(items) == 2
        results = []
        for n, item in enumerate(items):
            ctx = RolloutContext(
                completer=DemoWorld(),
                timeout_s=20,
                max_output_tokens=64,
                workdir=tmp_path / "work" / str(n),
            )
            results.append(await env.rollout(item, "Always answer yes.", ctx))
    yes_item = items[0]
    assert results[0].hard == 1.0 and results[0].reason == ""
    assert results[1].hard == 0.0 and results[1].reason.startswith("EM=0")
    assert "Read task.md: succeeded" in results[0].trajectory
    skill_md = tmp_path / "work/0/workspace/.agents/skills/skillopt-target/SKILL.md"
    assert "Always answer yes." in skill_md.read_text()
    call = fake.calls()[0]
    assert "task.md" in call["stdin"]
    task = (tmp_path / "work/0/workspace/task.md").read_text()
    assert yes_item.data["question"] in task


async def test_a_short_run_with_an_agent_cli_target(tmp_path: Path) -> None:
    cfg, fake = exec_cfg(tmp_path, "evaluation.eval_test=false", "optimizer.use_slow_update=false")
    async with open_environment(cfg) as env, pool_of(DemoWorld()) as pool:  # type: ignore[arg-type]
        summary = await Trainer(cfg, env, pool).run()  # type: ignore[arg-type]
    history = json.loads((tmp_path / "run/history.json").read_text())
    assert len(history) == 1
    # the agent answers "yes" whatever the skill says: no candidate can beat the baseline
    assert history[0]["action"] in ("reject", "skip_no_patches")
    assert summary["best_gate_score"] == summary["baseline_gate_score"]
    assert len(fake.calls()) >= 12  # baseline val + train rollouts went through the CLI


async def test_exec_env_needs_a_cli_member(tmp_path: Path) -> None:
    cfg, _ = exec_cfg(tmp_path, "env.exec_member=")
    with pytest.raises(ConfigError, match="exec_member"):
        async with open_environment(cfg):  # type: ignore[arg-type]
            pass
