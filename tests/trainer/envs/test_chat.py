"""The ``chat`` environment: one reply per item, scored by the scorer the config names."""

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
from skillopt.trainer.envs.chat import ChatEnvironment
from skillopt.trainer.loop import Trainer
from skillopt.types import Split
from support.trainer_fakes import ScriptedBackend, pool_of

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "configs/trainer/rubric_demo.toml"


def write_set(root: Path, rows: list[dict[str, object]]) -> Path:
    """``rows`` in every split, their ids prefixed with the split (ids are unique)."""
    root.mkdir(parents=True, exist_ok=True)
    for split in ("train", "val", "test"):
        lines = [json.dumps({**r, "id": f"{split}-{r['id']}"}) + "\n" for r in rows]
        (root / f"{split}.jsonl").write_text("".join(lines))
    return root


async def test_the_rubric_demo_learns_what_the_judge_asks_for(tmp_path: Path) -> None:
    cfg = load_trainer_config(DEMO, overrides=[f"out_root={json.dumps(str(tmp_path / 'run'))}"])
    summary = await Trainer(cfg, build_environment(cfg), pool_of(DemoWorld())).run()
    assert summary["baseline_test_hard"] == 0.0 and summary["test_hard"] == 1.0
    rows = json.loads((tmp_path / "run/selection_eval_baseline/results.json").read_text())
    assert all(r["fail_reason"].startswith("rubric: judged") for r in rows["results"])
    assert "name the cause" in (tmp_path / "run/best_skill.md").read_text()


async def test_a_numeric_file_scores_within_tolerance(tmp_path: Path) -> None:
    data = write_set(tmp_path / "d", [
        {"id": "n1", "question": "How many people live in Brelmor?", "answer": "12,500"},
        {"id": "n2", "question": "How many wells are there?", "answers": ["40"]},
    ])  # fmt: skip
    replies = {"test-n1": "About 12 480 people.", "test-n2": "<answer>41 wells</answer>"}

    def reply(request: CompletionRequest) -> str:
        return next(v for k, v in replies.items() if k == request.metadata["qa_item"]["id"])

    env = ChatEnvironment(data, options={"scorer": {"kind": "numeric", "rel_tol": 0.01}})
    ctx = RolloutContext(completer=pool_of(ScriptedBackend(reply=reply)), timeout_s=5,
                         max_output_tokens=64, workdir=tmp_path / "w")  # fmt: skip
    first, second = [await env.rollout(item, "", ctx) for item in env.items(Split.TEST)]
    assert first.hard == 1.0  # 12480 is within 1% of 12,500
    assert second.hard == 0.0 and second.reason.startswith("out_of_tolerance: read 41")


@pytest.mark.parametrize(
    ("scorer", "row", "problem"),
    [
        ("em", {"id": "x", "question": "q"}, "'answers'"),
        ("rubric", {"id": "x", "question": "q", "answer": "a"}, "'rubric'"),
        ("regex", {"id": "x", "question": "q"}, "'pattern'"),
        ("em", {"id": "x", "answer": "a"}, "'question'"),
    ],
)
def test_a_row_missing_what_its_scorer_reads_is_named(
    tmp_path: Path, scorer: str, row: dict[str, object], problem: str
) -> None:
    data = write_set(tmp_path / "d", [row])
    with pytest.raises(DataError, match=r"train\.jsonl:1: .*" + re.escape(problem)):
        ChatEnvironment(data, options={"scorer": scorer})


def test_the_program_scorer_belongs_to_exec_check(tmp_path: Path) -> None:
    data = write_set(tmp_path / "d", [{"id": "x", "question": "q", "answer": "a"}])
    with pytest.raises(ConfigError, match="exec_check"):
        ChatEnvironment(data, options={"scorer": "program"})
    with pytest.raises(ConfigError, match=r"env\.options\.scorr"):
        ChatEnvironment(data, options={"scorr": "em"})
