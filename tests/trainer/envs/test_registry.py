"""An environment from a package of our user's, found by dotted path or entry point, as
docs/trainer.md shows it: the example in the docs is the one these tests run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from skillopt.errors import ConfigError
from skillopt.trainer.build import build_environment
from skillopt.trainer.config import load_trainer_config
from skillopt.trainer.envs.base import Split
from skillopt.trainer.envs.registry import ENTRY_POINT_GROUP, load_factory

REPO = Path(__file__).resolve().parents[3]


def docs_example() -> str:
    """The first python block of "Adding an environment" in docs/trainer.md."""
    text = (REPO / "docs" / "trainer.md").read_text()
    section = text[text.index("## Adding an environment") :]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None
    return found.group(1)


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``my_envs.arith`` from the docs, importable, and declared as the entry point
    ``arith`` by an installed distribution (a dist-info directory on sys.path)."""
    root = tmp_path / "site"
    (root / "my_envs").mkdir(parents=True)
    (root / "my_envs" / "__init__.py").write_text("")
    (root / "my_envs" / "arith.py").write_text(docs_example())
    info = root / "my_envs-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-envs\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\narith = my_envs.arith:make_env\n"
    )
    monkeypatch.syspath_prepend(str(root))
    return root


def _config(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "own.toml"
    path.write_text(
        f"base = {json.dumps(str(REPO / 'configs' / 'trainer' / 'base.toml'))}\n"
        f"out_root = {json.dumps(str(tmp_path / 'run'))}\n"
        "[train]\nnum_epochs = 1\nbatch_size = 2\n"
        "[optimizer]\nuse_slow_update = false\nuse_meta_skill = false\n"
        f"[env]\nname = {json.dumps(name)}\noptions = {{ size = 4 }}\n"
    )
    return path


def test_the_documented_environment_trains_by_dotted_path(tmp_path: Path, package: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(package), str(REPO / "src")]))
    done = subprocess.run(
        [sys.executable, "-m", "skillopt.cli", "train", "--config",
         str(_config(tmp_path, "my_envs.arith:make_env"))],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["total_steps"] == 2  # 4 train items, batches of 2
    results = json.loads(
        (tmp_path / "run" / "selection_eval_baseline" / "results.json").read_text()
    )
    assert sorted(r["id"] for r in results["results"]) == ["val-0", "val-1", "val-2", "val-3"]


def test_an_entry_point_name_finds_the_same_environment(tmp_path: Path, package: Path) -> None:
    cfg = load_trainer_config(_config(tmp_path, "arith"))
    env = build_environment(cfg)
    assert env.name == "arith" and len(env.items(Split.TEST)) == 4


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("nope", "unknown environment 'nope' (known: qa, qa_exec"),
        ("no_such_module_here:make", "cannot import 'no_such_module_here'"),
        ("my_envs.arith:missing", "has no 'missing'"),
        ("my_envs.arith:ArithEnv.name", "is not callable"),
    ],
)
def test_a_bad_name_is_a_config_error_on_env_name(package: Path, name: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_factory(name)
    assert caught.value.key == "env.name" and says in str(caught.value)
