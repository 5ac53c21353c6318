"""The environment template in docs/trainer-env-template.md works as written."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from skillopt.backends.base import CompletionRequest
from skillopt.errors import DataError
from skillopt.trainer.build import build_environment
from skillopt.trainer.config import load_trainer_config
from skillopt.trainer.envs.base import RolloutContext
from skillopt.types import Split
from support.trainer_fakes import ScriptedBackend, pool_of

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "trainer-env-template.md"


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), re.DOTALL)


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "site" / "my_recipes"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "recipes.py").write_text(blocks("python")[0])
    monkeypatch.syspath_prepend(str(root.parent))
    yield root
    for name in [m for m in sys.modules if m.split(".")[0] == "my_recipes"]:
        del sys.modules[name]


def config(tmp_path: Path, rows: list[dict[str, object]]) -> Path:
    data = tmp_path / "data" / "recipes"
    data.mkdir(parents=True)
    for split in ("train", "val", "test"):  # ids are unique across the splits
        lines = [json.dumps({**r, "id": f"{split}-{r['id']}"}) + "\n" for r in rows]
        (data / f"{split}.jsonl").write_text("".join(lines))
    path = tmp_path / "recipes.toml"
    base = json.dumps(str(REPO / "configs/trainer/base.toml"))
    path.write_text(f"base = {base}\n" + blocks("toml")[0])
    return path


async def test_the_template_loads_items_and_scores_with_the_configured_scorer(
    tmp_path: Path, package: Path
) -> None:
    rows = [{"id": "bread", "dish": "bread", "answer": 35},
            {"id": "pie", "dish": "apple pie", "answer": 50}]  # fmt: skip
    env = build_environment(load_trainer_config(config(tmp_path, rows)))

    def reply(request: CompletionRequest) -> str:
        return "<answer>36 minutes</answer>" if "bread" in request.prompt else "about an hour"

    ctx = RolloutContext(completer=pool_of(ScriptedBackend(reply=reply)), timeout_s=5,
                         max_output_tokens=64, workdir=tmp_path / "w")  # fmt: skip
    bread, pie = [await env.rollout(item, "", ctx) for item in env.items(Split.TEST)]
    assert bread.hard == 1.0  # 36 is within abs_tol = 1 of 35
    assert pie.hard == 0.0 and pie.reason.startswith("no_number")
    assert env.task_types() == ["recipe"]


def test_the_templates_item_check_names_the_line(tmp_path: Path, package: Path) -> None:
    with pytest.raises(DataError, match=r"train\.jsonl:1: 'dish'"):
        build_environment(load_trainer_config(config(tmp_path, [{"id": "x", "answer": 3}])))
