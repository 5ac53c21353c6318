"""Epoch-end calls that fail are recorded as failed, not as "the model had nothing to say"."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from skillopt.backends.base import Completion, CompletionRequest, Usage
from skillopt.trainer.build import build_environment
from skillopt.trainer.config import load_trainer_config
from skillopt.trainer.demo import DemoWorld
from skillopt.trainer.loop import Trainer
from support.trainer_fakes import pool_of

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs/trainer/qa_demo.toml"


@dataclass
class GarbledEpochEnd:
    """The demo world, except slow-update and meta-skill replies are not JSON."""

    inner: DemoWorld = field(default_factory=DemoWorld)
    name: str = "garbled"
    model: str = "garbled-model"

    async def complete(self, request: CompletionRequest) -> Completion:
        if request.stage in ("slow_update", "meta_skill"):
            text = "sorry, no JSON today"
            return Completion(
                text=text, usage=Usage.estimate(request.prompt, text), member=self.name, latency=0.0
            )
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        return None


async def test_failed_slow_update_and_meta_skill_are_recorded_as_failed(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = load_trainer_config(
        DEMO,
        overrides=[
            f"out_root={json.dumps(str(out))}",
            "backend.demo_latency_s=0",
            "evaluation.eval_test=false",
        ],
    )
    async with pool_of(GarbledEpochEnd()) as pool:
        await Trainer(cfg, build_environment(cfg), pool).run()
    slow = json.loads((out / "slow_update/epoch_02/slow_result.json").read_text())
    meta = json.loads((out / "meta_skill/epoch_02/meta_skill_result.json").read_text())
    assert slow["action"] == "failed"
    assert meta["action"] == "failed"
    end = json.loads((out / "epochs/epoch_02/epoch_end.json").read_text())
    assert {d["stage"] for d in end["diagnostics"]} >= {"slow_update", "meta_skill"}
