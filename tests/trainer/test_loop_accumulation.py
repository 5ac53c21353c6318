"""Accumulation: micro-batches of a step are rolled out and analysed together, and resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skillopt.backends.base import Backend
from skillopt.errors import BackendRequestError
from skillopt.trainer.build import build_environment
from skillopt.trainer.config import TrainerConfig, load_trainer_config
from skillopt.trainer.demo import DemoWorld
from skillopt.trainer.loop import Trainer
from support.trainer_fakes import FailingWrapper, pool_of

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs/trainer/qa_demo.toml"


def cfg(out: Path) -> TrainerConfig:
    return load_trainer_config(
        DEMO,
        overrides=[
            f"out_root={json.dumps(str(out))}",
            "backend.demo_latency_s=0",
            "train.batch_size=10",
            "train.accumulation=2",
            "train.num_epochs=1",
            "evaluation.eval_test=false",
        ],
    )


async def train(config: TrainerConfig, backend: Backend) -> None:
    async with pool_of(backend) as pool:
        await Trainer(config, build_environment(config), pool).run()


def history(out: Path) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads((out / "history.json").read_text())
    return [{k: v for k, v in rec.items() if k != "tokens"} for rec in data]


@pytest.mark.slow
async def test_two_micro_batches_per_step_and_resume(tmp_path: Path) -> None:
    full = tmp_path / "full"
    await train(cfg(full), DemoWorld())
    hist = history(full)
    # 60 items, batch 10 x accumulation 2 -> 3 steps, each over two seeded micro-batches
    assert [h["step"] for h in hist] == [1, 2, 3]
    assert [[b["batch_seed"] for b in h["accumulation_batches"]] for h in hist] == [
        [1043, 1044],
        [1045, 1046],
        [1047, 1048],
    ]
    assert all(h["rollout_n"] == 20 for h in hist)
    for a in (0, 1):
        rows = json.loads((full / f"steps/step_0001/batch_{a}/rollout/results.json").read_text())
        assert len(rows["results"]) == 10

    out = tmp_path / "crashy"
    crashing = FailingWrapper(
        inner=DemoWorld(),
        fail=lambda r: r.stage == "merge" and (out / "steps/step_0002/batch_1/patches").exists(),
    )
    with pytest.raises(BackendRequestError):
        await train(cfg(out), crashing)
    saved = [out / f"steps/step_0002/batch_{a}/rollout/results.json" for a in (0, 1)]
    before = [(p.stat().st_ino, p.stat().st_mtime_ns) for p in saved]
    await train(cfg(out), DemoWorld())
    assert history(out) == hist
    # step 2's micro-batch rollouts were reused, not rolled out and written again
    assert [(p.stat().st_ino, p.stat().st_mtime_ns) for p in saved] == before
