"""A judge whose verdicts are unusable (issue 31): the rubric demo over HTTP, its judge
answering prose. Each such answer is an untested sample with its diagnostic, never a failed
run; every request the server saw is counted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skillopt.backends.pool import BackendPool
from skillopt.config import PoolConfig
from skillopt.trainer.build import build_environment
from skillopt.trainer.config import load_trainer_config
from skillopt.trainer.envs.base import EnvItem
from skillopt.trainer.loop import Trainer
from support.demo_world_http import Reshape, demo_items, demo_reply_fn, first_user
from support.fake_model_server import FakeModelServer

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs/trainer/rubric_demo.toml"
GARBAGE = "I would rate this answer as quite good overall."


def _rubric_item(item: EnvItem) -> dict[str, Any]:
    """A rubric item as the demo world reads a QA one: its reference is the answer."""
    return {"id": item.id, "task_type": item.task_type, "answers": [item.data["reference"]]}


def _prose_verdicts(unusable: Callable[[str], bool]) -> Reshape:
    """A judge answering prose to the prompts ``unusable`` picks."""
    return lambda text, request: GARBAGE if unusable(first_user(request)) else text


async def _train(tmp_path: Path, unusable: Callable[[str], bool]) -> tuple[Any, Any, int]:
    out = tmp_path / "run"
    cfg = load_trainer_config(
        DEMO, overrides=[f"out_root={json.dumps(str(out))}", "train.num_epochs=1"]
    )
    env = build_environment(cfg)
    items = demo_items(env, as_item=_rubric_item)
    reply = demo_reply_fn(_prose_verdicts(unusable), stage="judge", items=items)
    with FakeModelServer(reply_fn=reply) as server:
        pool_cfg = PoolConfig.model_validate({
            "members": [{"kind": "openai", "name": "m", "base_url": server.url("m"),
                         "model": "fake", "timeout": 10}],
            "roles": {"target": ["m"], "optimizer": ["m"]},
        })  # fmt: skip
        async with BackendPool.from_config(pool_cfg) as pool:
            trainer = Trainer(cfg, env, pool, pool_accounting=pool.accounting)
            summary = await trainer.run()
        return trainer, summary, server.total("m")


async def test_a_judge_with_no_usable_verdict_leaves_untested_samples_not_a_failed_run(
    tmp_path: Path,
) -> None:
    trainer, summary, sent = await _train(tmp_path, unusable=lambda _prompt: True)
    out = tmp_path / "run"
    assert summary["total_steps"] == 2 and (out / "best_skill.md").is_file()
    rows = json.loads((out / "selection_eval_baseline/results.json").read_text())["results"]
    assert rows and all(r["error"].startswith("judge_unusable: ") for r in rows)
    kept = rows[0]["extras"]["judge_unusable"]  # the unusable reply and why, with its row
    assert kept["reply"] == GARBAGE and len(kept["problems"]) == 2
    history = json.loads((out / "history.json").read_text())
    noted = [d for h in history for d in h["diagnostics"] if d["stage"] == "judge"]
    assert noted and all(d["error"].startswith("judge_unusable: ") for d in noted)
    # the run's accounting counts every request the server saw, each retry of a verdict too
    timing = json.loads((out / "timing.json").read_text())
    assert timing["pool_accounting"]["total"]["calls"] == sent
    counted = trainer.core.ctx.completer.snapshot()
    assert sum(row["calls"] for row in counted.values()) == sent


async def test_a_few_unusable_verdicts_are_left_out_of_what_the_analyst_reads(
    tmp_path: Path,
) -> None:
    _, summary, _ = await _train(tmp_path, unusable=lambda prompt: "sky blue" in prompt)
    assert summary["total_steps"] == 2
    analyst_prompts = [
        p.read_text() for p in (tmp_path / "run").rglob("patches/*.json")
    ]  # the patches name the items each analyst read
    read = {i for text in analyst_prompts for i in json.loads(text).get("item_ids", [])}
    assert "why-01" not in read  # the sky question: its answer was never scored
