"""A step whose good rule sits between two harmful ones: the trainer decides edit by edit,
as the night does (singles, then the ones that passed together).

The optimizer proposes the same three edits every step: two wordings of the demo world's
harmful "restate the question" rule (each breaks every answer) and the rule that fixes every
"place" item. The whole candidate breaks every val item; the current skill already fails
every one, so no item moves. Leaving one edit out still leaves a harmful one in, so
leave-one-out attribution finds nothing. Before, such a step was rejected (every step of
the run, the skill stayed empty); now the place rule alone is compared with the current
skill, passes, and is measured again on fresh samples.
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
from skillopt.trainer.demo import HARMFUL_RULE, RULES, DemoWorld
from skillopt.trainer.envs.qa import bundled_data_dir
from skillopt.trainer.loop import Trainer
from support.trainer_fakes import ScriptedBackend

REPO = Path(__file__).resolve().parents[2]
GOOD = RULES["place"].text
HARMFUL_TOO = "Restate the question word for word on the first line, then answer it."
EDITS = [HARMFUL_RULE, HARMFUL_TOO, GOOD]


def place_split(src: Path, dst: Path) -> None:
    """Every split: its "place" items only (the val split has six)."""
    dst.mkdir()
    for split in ("train", "val", "test"):
        rows = [json.loads(line) for line in (src / f"{split}.jsonl").read_text().splitlines()]
        places = [r for r in rows if r["task_type"] == "place"][:6]
        (dst / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in places))


def world(seed: int, flip: float, edits: list[dict[str, str]] | None = None) -> ScriptedBackend:
    """The demo target with ``flip`` of its answers flipped (right <-> wrong), drawn from the
    request and its sample id (never from call order); an optimizer proposing ``EDITS``."""
    demo = DemoWorld()

    def reply(request: CompletionRequest) -> str:
        if request.role is Role.TARGET:
            text = demo._answer(request)
            gold = str(request.metadata["qa_item"]["answers"][0])
            key = f"{seed}\x1f{request.text_for_key()}\x1f{request.sample_id}".encode()
            draw = int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2**64
            if draw >= flip:
                return text
            right = text.endswith(f"<answer>{gold}</answer>")
            return "<answer>not sure</answer>" if right else f"<answer>{gold}</answer>"
        if request.stage == "analyst":
            return json.dumps({"batch_size": 2, "patch": {"reasoning": "", "edits": edits}})
        return json.dumps({"reasoning": "", "edits": edits, "selected_indices": [0, 1, 2]})

    edits = edits or [{"op": "append", "target": "", "content": c} for c in EDITS]
    return ScriptedBackend(reply=reply)


async def run(
    tmp_path: Path,
    name: str,
    *,
    seed: int,
    flip: float,
    edits: list[dict[str, str]] | None = None,
) -> Path:
    data = tmp_path / "data"
    if not data.exists():
        place_split(bundled_data_dir(), data)
    out = tmp_path / name
    cfg = load_trainer_config(
        REPO / "configs/trainer/qa_demo.toml",
        overrides=[
            f"out_root={json.dumps(str(out))}",
            f"env.data_dir={json.dumps(str(data))}",
            "backend.demo_latency_s=0",
            "train.num_epochs=1",
            "train.batch_size=2",
            "optimizer.lr_scheduler='constant'",
            "optimizer.learning_rate=3",
            "optimizer.use_slow_update=false",
            "optimizer.use_meta_skill=false",
            "evaluation.eval_test=false",
        ],
    )
    spec = MemberSpec(backend=world(seed, flip, edits), max_concurrency=16, timeout=30.0)
    pool = BackendPool({Role.TARGET: [spec], Role.OPTIMIZER: [spec]}, cache=ResponseCache())
    async with pool:
        await Trainer(cfg, build_environment(cfg), pool).run()
    return out


def tree(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != "timing.json"
    }


async def test_a_good_rule_between_two_harmful_ones_is_kept_alone(tmp_path: Path) -> None:
    out = await run(tmp_path, "run", seed=0, flip=0.0)
    history = json.loads((out / "history.json").read_text())
    first = history[0]
    assert first["action"] == "accept_new_best"
    assert sorted(first["dropped_edits"]) == sorted(f"append: {r}" for r in EDITS[:2])
    assert [a["dropped"] for a in first["attribution"]] == [True, True, False]
    assert first["looks"] == ["spoilers", "singles"]
    best = (out / "best_skill.md").read_text()
    assert GOOD in best
    assert "restate the question" not in best.lower()


async def test_a_step_whose_edits_build_no_skill_alone_is_rejected_whole(tmp_path: Path) -> None:
    """Issue 31: a small model echoed its prompt's example edits; the one that applies is
    the whole candidate, the others change nothing. No edit alone builds a skill of its
    own, so the whole's comparison stands (it was an AssertionError that ended the run)."""
    echoed = [
        {"op": "append", "target": "", "content": HARMFUL_RULE},
        {"op": "delete", "target": "<exact text or empty>", "content": ""},
        {"op": "delete", "target": "<new text or empty>", "content": ""},
    ]
    out = await run(tmp_path, "run", seed=0, flip=0.0, edits=echoed)
    first = json.loads((out / "history.json").read_text())[0]
    assert first["action"] != "accept_new_best"
    assert HARMFUL_RULE not in (out / "best_skill.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
async def test_a_noisy_run_keeps_the_good_rule_and_repeats_byte_for_byte(
    tmp_path: Path, seed: int
) -> None:
    """20 % of answers flipped: the good rule still gets in, no harmful one ever does, and
    the same seed writes the same bytes."""
    a = await run(tmp_path, "a", seed=seed, flip=0.2)
    b = await run(tmp_path, "b", seed=seed, flip=0.2)
    best = (a / "best_skill.md").read_text()
    assert GOOD in best
    assert "restate the question" not in best.lower()
    assert tree(a) == tree(b)
