"""The trainer's gate over a noisy world: 20% of the target's answers flipped (issue 15).

The target answers two of six val items without any rule, and the optimizer proposes only
a rule that breaks every answer. A strict ``>`` against a baseline measured once (and read
back from the cache) accepted it by chance; the paired gate on fresh samples must not.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from skillopt.backends.base import CompletionRequest, Role
from skillopt.backends.cache import ResponseCache
from skillopt.backends.pool import BackendPool, MemberSpec
from skillopt.trainer.build import build_environment
from skillopt.trainer.config import load_trainer_config
from skillopt.trainer.demo import HARMFUL_RULE, DemoWorld
from skillopt.trainer.envs.qa import bundled_data_dir
from skillopt.trainer.loop import Trainer
from support.trainer_fakes import ScriptedBackend

REPO = Path(__file__).resolve().parents[2]
FLIP = 0.2


def small_split(src: Path, dst: Path) -> None:
    """Six items per split: two the empty skill answers ("plain"), four it gets wrong."""
    dst.mkdir()
    for split in ("train", "val", "test"):
        rows = [json.loads(line) for line in (src / f"{split}.jsonl").read_text().splitlines()]
        plain = [r for r in rows if r["task_type"] == "plain"][:2]
        typed = [r for r in rows if r["task_type"] != "plain"][:4]
        (dst / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in plain + typed))


def noisy_world(seed: int) -> ScriptedBackend:
    """The demo world's target with ``FLIP`` of its answers flipped (right <-> wrong), drawn
    from the request and its sample id; an optimizer that only ever proposes the harmful rule."""
    world = DemoWorld()

    def reply(request: CompletionRequest) -> str:
        if request.role is Role.TARGET:
            text = world._answer(request)
            gold = str(request.metadata["qa_item"]["answers"][0])
            key = f"{seed}\x1f{request.text_for_key()}\x1f{request.sample_id}".encode()
            draw = int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2**64
            if draw >= FLIP:
                return text
            right = text.endswith(f"<answer>{gold}</answer>")
            return "<answer>not sure</answer>" if right else f"<answer>{gold}</answer>"
        edit = {"op": "append", "target": "", "content": HARMFUL_RULE}
        if request.stage == "analyst":
            return json.dumps({"batch_size": 4, "patch": {"reasoning": "", "edits": [edit]}})
        return json.dumps({"reasoning": "", "edits": [edit], "selected_indices": [0]})

    return ScriptedBackend(reply=reply)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_harmful_rule_is_never_accepted_in_a_noisy_world(tmp_path: Path, seed: int) -> None:
    data = tmp_path / "data"
    small_split(bundled_data_dir(), data)
    out = tmp_path / "run"
    cfg = load_trainer_config(
        REPO / "configs/trainer/qa_demo.toml",
        overrides=[
            f"out_root={json.dumps(str(out))}",
            f"env.data_dir={json.dumps(str(data))}",
            "backend.demo_latency_s=0",
            "train.num_epochs=2",
            "train.batch_size=2",
            "optimizer.use_slow_update=false",
            "optimizer.use_meta_skill=false",
            "evaluation.eval_test=false",
        ],
    )
    backend = noisy_world(seed)
    spec = MemberSpec(backend=backend, max_concurrency=16, timeout=30.0)
    pool = BackendPool({Role.TARGET: [spec], Role.OPTIMIZER: [spec]}, cache=ResponseCache())
    async with pool:
        await Trainer(cfg, build_environment(cfg), pool).run()
    history = json.loads((out / "history.json").read_text())
    gated = [h for h in history if "gate" in h]
    assert len(gated) == 6  # 3 steps per epoch, each proposing the rule
    assert [h["action"] for h in gated] == ["reject"] * 6
    assert HARMFUL_RULE not in (out / "best_skill.md").read_text()
    # the gate drew fresh samples: numbered apart per step, never served from the cache
    gate_calls = [r for r in backend.requests if r.role is Role.TARGET and not r.use_cache]
    assert len({r.sample_id for r in gate_calls}) >= 6
    assert all(h["gate"]["mode"] == "paired" for h in gated)
