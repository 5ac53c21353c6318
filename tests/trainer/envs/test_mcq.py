"""The ``mcq`` environment: shuffled options, letters read back, the un-shuffled label kept,
and a position-biased model held to chance."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from skillopt.backends.base import CompletionRequest
from skillopt.errors import ConfigError, DataError
from skillopt.trainer.build import build_environment
from skillopt.trainer.config import load_trainer_config
from skillopt.trainer.demo import DemoWorld
from skillopt.trainer.envs.base import RolloutContext
from skillopt.trainer.envs.mcq import MCQEnvironment
from skillopt.trainer.loop import Trainer
from skillopt.types import Split
from support.trainer_fakes import ScriptedBackend, pool_of

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "configs/trainer/mcq_demo.toml"


def write_items(root: Path, n: int) -> Path:
    """``n`` items per split whose right option is always the first in the file (as many
    datasets have it)."""
    root.mkdir(parents=True, exist_ok=True)
    for split in ("train", "val", "test"):
        rows = [
            {
                "id": f"{split}-{i}",
                "question": f"What is {i} + {i}?",
                "choices": [str(2 * i), str(2 * i + 1), str(2 * i + 2), str(2 * i + 3)],
                "answer": "A",
            }
            for i in range(n)
        ]
        (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def always(letter: str) -> ScriptedBackend:
    return ScriptedBackend(reply=lambda _r: f"I pick the first one.\n<answer>{letter}</answer>")


def solver() -> ScriptedBackend:
    """Reads the options as shown and picks the one that is the sum."""

    def reply(request: CompletionRequest) -> str:
        i = int(re.search(r"What is (\d+) \+", request.prompt).group(1))  # type: ignore[union-attr]
        letter = re.search(rf"^([A-D])\) {2 * i}$", request.prompt, re.M).group(1)  # type: ignore[union-attr]
        return f"The answer is {letter}."

    return ScriptedBackend(reply=reply)


async def score(env: MCQEnvironment, backend: ScriptedBackend, tmp_path: Path) -> float:
    pool = pool_of(backend)
    total = 0.0
    items = env.items(Split.TEST)
    for item in items:
        ctx = RolloutContext(completer=pool, timeout_s=10, max_output_tokens=64,
                             workdir=tmp_path / "w")  # fmt: skip
        total += (await env.rollout(item, "", ctx)).hard
    return total / len(items)


async def test_shuffling_holds_a_position_biased_model_to_chance(tmp_path: Path) -> None:
    data = write_items(tmp_path / "data", 200)
    unshuffled = MCQEnvironment(data, seed=3, shuffle=False)
    shuffled = MCQEnvironment(data, seed=3, shuffle=True)
    assert await score(unshuffled, always("A"), tmp_path) == 1.0  # the file's habit pays
    biased = await score(shuffled, always("A"), tmp_path)
    assert 0.25 - 0.08 <= biased <= 0.25 + 0.08  # chance with 4 options (sd ~0.03)
    assert await score(shuffled, solver(), tmp_path) == 1.0  # letters map back correctly


async def test_a_result_records_the_label_in_the_files_order(tmp_path: Path) -> None:
    env = MCQEnvironment(write_items(tmp_path / "data", 4), seed=3)
    backend = always("B")
    ctx = RolloutContext(completer=pool_of(backend), timeout_s=10, max_output_tokens=64,
                         workdir=tmp_path / "w")  # fmt: skip
    item = env.items(Split.TRAIN)[0]
    result = await env.rollout(item, "Work out the answer.", ctx)
    shown = env.presentation(item, 0)
    assert result.response == "ABCD"[shown.original_index("B")]
    assert result.extras["chosen"] == "B" and result.extras["gold_original"] == "A"
    assert result.extras["order"] == list(shown.order)
    assert "B) " in backend.requests[0].prompt and "Options as shown:" in result.trajectory
    again = await env.rollout(item, "Work out the answer.", ctx)  # same sample: same order
    assert again == result


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ({"id": "x", "question": "Q?", "choices": ["only one"], "answer": "A"}, "'choices'"),
        ({"id": "x", "question": "Q?", "choices": ["a", "b"], "answer": "C"}, "'answer' 'C'"),
        ({"id": "x", "question": "Q?", "choices": ["a", "b"]}, "needs 'answer'"),
        ({"id": "x", "question": "Q?", "choices": ["a", "b"], "answer_index": 2}, "'answer_index'"),
        ({"id": "x", "choices": ["a", "b"], "answer": "A"}, "'question'"),
    ],
)
def test_bad_items_are_named_by_file_line_and_field(
    tmp_path: Path, row: dict[str, object], problem: str
) -> None:
    data = write_items(tmp_path / "data", 2)
    with (data / "val.jsonl").open("a") as out:
        out.write(json.dumps(row) + "\n")
    with pytest.raises(DataError, match=rf"val\.jsonl:3: .*{re.escape(problem)}"):
        MCQEnvironment(data)


def test_answers_by_letter_text_or_index_agree(tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    rows = [
        {"id": "a", "question": "q", "choices": ["x", "y", "z"], "answer": "b"},
        {"id": "b", "question": "q", "choices": ["x", "y", "z"], "answer": "y"},
        {"id": "c", "question": "q", "choices": ["x", "y", "z"], "answer_index": 1},
    ]
    for split in ("train", "val", "test"):  # ids are unique across the splits
        lines = [json.dumps({**r, "id": f"{split}-{r['id']}"}) + "\n" for r in rows]
        (root / f"{split}.jsonl").write_text("".join(lines))
    env = MCQEnvironment(root, shuffle=False)
    shown = [env.presentation(i, 0) for i in env.items(Split.TRAIN)]
    assert {s.presented_letter(1) for s in shown} == {"B"}


def test_unknown_options_are_config_errors(tmp_path: Path) -> None:
    cfg = load_trainer_config(DEMO, overrides=["env.options={ shufle = false }"])
    with pytest.raises(ConfigError, match=r"env\.options\.shufle"):
        build_environment(cfg)


async def test_the_offline_demo_learns_past_position_bias(tmp_path: Path) -> None:
    cfg = load_trainer_config(DEMO, overrides=[f"out_root={json.dumps(str(tmp_path / 'run'))}"])
    env = build_environment(cfg)
    summary = await Trainer(cfg, env, pool_of(DemoWorld())).run()
    assert summary["baseline_test_hard"] < 0.5  # the demo target picks A: chance
    assert summary["test_hard"] == 1.0
    best = (tmp_path / "run" / "best_skill.md").read_text()
    assert "work out the answer" in best.lower()
    rows = json.loads((tmp_path / "run/test_eval/results.json").read_text())["results"]
    assert all(r["prediction"] == r["extras"]["gold_original"] for r in rows)


async def test_two_demo_runs_write_the_same_files(tmp_path: Path) -> None:
    """The permutation depends on the seed, the item and the sample only, never on order."""
    files = ("history.json", "selection_eval_baseline/results.json", "test_eval/results.json")
    texts = []
    for name in ("one", "two"):
        out = f"out_root={json.dumps(str(tmp_path / name))}"
        cfg = load_trainer_config(DEMO, overrides=[out, "train.num_epochs=1"])
        await Trainer(cfg, build_environment(cfg), pool_of(DemoWorld())).run()
        texts.append([(tmp_path / name / rel).read_text() for rel in files])
    assert texts[0] == texts[1]


def shown_orders(results: Path) -> dict[str, list[int]]:
    rows = json.loads(results.read_text())["results"]
    return {r["id"]: r["extras"]["order"] for r in rows}


async def test_each_training_attempt_draws_its_own_option_order(tmp_path: Path) -> None:
    """Step n's rollouts are sample n: an item met again in epoch 2 is shown another order
    (for some item: 1 in 24 keeps it by chance); the epoch-end comparison shows the previous
    and the current skill one order (paired)."""
    out = tmp_path / "run"
    cfg = load_trainer_config(DEMO, overrides=[f"out_root={json.dumps(str(out))}",
                                               "evaluation.eval_test=false"])  # fmt: skip
    await Trainer(cfg, build_environment(cfg), pool_of(DemoWorld())).run()
    epoch1: dict[str, list[int]] = {}
    epoch2: dict[str, list[int]] = {}
    for step, into in ((1, epoch1), (2, epoch1), (3, epoch2), (4, epoch2)):
        into.update(shown_orders(out / f"steps/step_{step:04d}/rollout/results.json"))
    assert set(epoch1) == set(epoch2)  # every train item, once per epoch
    assert any(epoch1[i] != epoch2[i] for i in epoch1)
    compared = out / "slow_update/epoch_02"
    prev = shown_orders(compared / "rollout_prev/results.json")
    assert prev == shown_orders(compared / "rollout_curr/results.json")
