"""Gold answers written with ``<answer>`` tags score like untagged ones (issue 15)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt.backends.base import CompletionRequest
from skillopt.judges import judge_answer
from skillopt.trainer.envs.base import RolloutContext
from skillopt.trainer.envs.qa import QAEnvironment, exact_match, token_f1
from skillopt.types import Split
from support.trainer_fakes import ScriptedBackend


@pytest.mark.parametrize(
    ("prediction", "golds", "hard"),
    [
        ("Paris", ["<answer>Paris</answer>"], 1.0),
        ("<answer>the Paris.</answer>", ["<answer> paris </answer>"], 1.0),
        ("<answer>Paris</answer>", ["Paris"], 1.0),
        ("Lyon", ["<answer>Paris</answer>"], 0.0),
        ("Paris", ["why\n<answer>Rome</answer> then <answer>Paris</answer>"], 1.0),
    ],
)
def test_prediction_and_gold_are_normalised_alike(
    prediction: str, golds: list[str], hard: float
) -> None:
    assert exact_match(prediction, golds) == hard
    assert token_f1(prediction, golds) == hard


def test_the_nights_answer_judge_reads_a_tagged_reference() -> None:
    assert judge_answer("<answer>42</answer>", "Answer: 42").hard == 1.0
    assert judge_answer("<answer>42</answer>", "<answer>41</answer>").hard == 0.0


async def test_a_split_with_tagged_gold_is_scorable(tmp_path: Path) -> None:
    row = {"question": "Capital of France?", "answers": ["<answer>Paris</answer>"]}
    for split in Split:
        (tmp_path / f"{split.value}.jsonl").write_text(
            json.dumps({"id": f"{split.value}-1", **row}) + "\n", encoding="utf-8"
        )
    env = QAEnvironment(tmp_path)
    backend = ScriptedBackend(reply=lambda _r: "Thinking.\n<answer>Paris</answer>")
    ctx = RolloutContext(
        completer=backend, timeout_s=5.0, max_output_tokens=64, workdir=tmp_path / "w"
    )
    result = await env.rollout(env.items(Split.TEST)[0], "", ctx)
    assert (result.hard, result.soft) == (1.0, 1.0)
    assert isinstance(backend.requests[0], CompletionRequest)
