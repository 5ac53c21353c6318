"""best_skill.md always matches the best skill the saved state names, even after a crash."""

from __future__ import annotations

import json
from pathlib import Path

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


def demo_cfg(out: Path) -> TrainerConfig:
    return load_trainer_config(
        DEMO, overrides=[f"out_root={json.dumps(str(out))}", "backend.demo_latency_s=0"]
    )


async def train(cfg: TrainerConfig, backend: Backend) -> None:
    async with pool_of(backend) as pool:
        await Trainer(cfg, build_environment(cfg), pool).run()


@pytest.mark.slow
async def test_a_stray_best_copy_left_by_a_crash_is_replaced_on_resume(tmp_path: Path) -> None:
    full = tmp_path / "full"
    await train(demo_cfg(full), DemoWorld())
    state = json.loads((full / "runtime_state.json").read_text())
    assert (full / "best_skill.md").read_text() == (full / state["best_skill_path"]).read_text()

    out = tmp_path / "crashy"
    crashing = FailingWrapper(
        inner=DemoWorld(),
        fail=lambda r: r.stage == "merge" and (out / "steps/step_0004/patches").exists(),
    )
    with pytest.raises(BackendRequestError):
        await train(demo_cfg(out), crashing)
    # What a crash between "write best_skill.md" and "save the state" of a step whose redo
    # then goes another way would leave behind: a best copy the state does not know.
    (out / "best_skill.md").write_text("a candidate that was never recorded as best\n")
    await train(demo_cfg(out), DemoWorld())
    assert (out / "best_skill.md").read_bytes() == (full / "best_skill.md").read_bytes()
    best_step = json.loads((out / "summary.json").read_text())["best_step"]
    assert best_step == json.loads((full / "summary.json").read_text())["best_step"] == 2
