"""The trainer's gate confirms a lone item's regression on fresh samples before it vetoes.

The optimizer proposes a correct rule (it fixes every "count" item). Under the new skill the
target also fumbles one plain item on its first six attempts, and never again: noise that
looks like a regression on the first look. With ``gate.confirm_samples = 0`` that look vetoes
the rule; with confirmation the fresh pairs clear the item and the rule is accepted.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from skillopt.backends.base import CompletionRequest, Role
from skillopt.backends.cache import ResponseCache
from skillopt.backends.pool import BackendPool, MemberSpec
from skillopt.trainer.build import build_environment
from skillopt.trainer.config import load_trainer_config
from skillopt.trainer.demo import RULES, DemoWorld
from skillopt.trainer.envs.qa import bundled_data_dir
from skillopt.trainer.loop import Trainer
from support.trainer_fakes import ScriptedBackend

REPO = Path(__file__).resolve().parents[2]
RULE = RULES["count"]
FUMBLES = 6  # first attempts at the fumbled item under the new skill that go wrong


def count_split(src: Path, dst: Path) -> str:
    """Val: two plain items and every "count" item; the id of the plain item to fumble."""
    dst.mkdir(parents=True)
    fumbled = ""
    for split in ("train", "val", "test"):
        rows = [json.loads(line) for line in (src / f"{split}.jsonl").read_text().splitlines()]
        plain = [r for r in rows if r["task_type"] == "plain"][:2]
        counts = [r for r in rows if r["task_type"] == "count"]
        if split == "val":
            fumbled = str(plain[0]["id"])
        (dst / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in plain + counts))
    return fumbled


def fumbling_world(fumbled: str) -> ScriptedBackend:
    world = DemoWorld()
    attempts: Counter[str] = Counter()

    def reply(request: CompletionRequest) -> str:
        if request.role is Role.TARGET:
            item = request.metadata["qa_item"]
            if str(item["id"]) == fumbled and RULE.phrase in request.system.lower():
                attempts[fumbled] += 1
                if attempts[fumbled] <= FUMBLES:
                    return "<answer>not sure</answer>"
            return world._answer(request)
        edit = {"op": "append", "target": "", "content": RULE.text}
        if request.stage == "analyst":
            return json.dumps({"batch_size": 4, "patch": {"reasoning": "", "edits": [edit]}})
        return json.dumps({"reasoning": "", "edits": [edit], "selected_indices": [0]})

    return ScriptedBackend(reply=reply)


async def run(tmp_path: Path, confirm: int) -> list[dict[str, object]]:
    data = tmp_path / "data"
    fumbled = count_split(bundled_data_dir(), data)
    out = tmp_path / "run"
    cfg = load_trainer_config(
        REPO / "configs/trainer/qa_demo.toml",
        overrides=[
            f"out_root={json.dumps(str(out))}",
            f"env.data_dir={json.dumps(str(data))}",
            "backend.demo_latency_s=0",
            "train.num_epochs=1",
            "train.batch_size=4",
            "optimizer.use_slow_update=false",
            "optimizer.use_meta_skill=false",
            "evaluation.eval_test=false",
            f"gate.confirm_samples={confirm}",
        ],
    )
    spec = MemberSpec(backend=fumbling_world(fumbled), max_concurrency=16, timeout=30.0)
    pool = BackendPool({Role.TARGET: [spec], Role.OPTIMIZER: [spec]}, cache=ResponseCache())
    async with pool:
        await Trainer(cfg, build_environment(cfg), pool).run()
    history = json.loads((out / "history.json").read_text())
    return [h for h in history if "gate" in h]


@pytest.mark.slow
async def test_a_fumble_on_one_item_vetoes_without_confirmation_and_not_with_it(
    tmp_path: Path,
) -> None:
    first_look = await run(tmp_path / "off", confirm=0)
    assert first_look[0]["action"] == "reject"
    assert first_look[0]["gate"]["regressed_ids"]  # type: ignore[index]

    confirmed = await run(tmp_path / "on", confirm=16)
    assert confirmed[0]["action"] == "accept_new_best"
    gate = confirmed[0]["gate"]
    assert gate["regressed_ids"] == []  # type: ignore[index]
    confirmed_items = [t for t in gate["per_task"] if "confirm_pairs" in t]  # type: ignore[index]
    assert [t["confirm_pairs"] for t in confirmed_items] == [16]
