"""`skillopt train` against real HTTP members whose analyst replies come in other shapes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.demo_world_http import demo_reply_fn
from support.fake_model_server import FakeModelServer, Request

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs/trainer/qa_demo.toml"


def train(tmp_path: Path, server: FakeModelServer) -> subprocess.CompletedProcess[str]:
    pool = tmp_path / "pool.toml"
    pool.write_text(
        f"""
[[members]]
kind = "openai"
name = "m"
base_url = "{server.url("m")}"
model = "fake"
timeout = 20
max_concurrency = 8

[roles]
target = ["m"]
optimizer = ["m"]

[cache]
enabled = false
"""
    )
    sets = {
        "out_root": json.dumps(str(tmp_path / "run")),
        "backend.kind": '"pool"',
        "backend.pool_config": json.dumps(str(pool)),
        "train.num_epochs": "1",
        "evaluation.eval_test": "false",
    }
    argv = [sys.executable, "-m", "skillopt.cli", "train", "--config", str(DEMO)]
    for key, value in sets.items():
        argv += ["--set", f"{key}={value}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO, check=False)


@pytest.mark.slow
def test_edits_without_the_patch_wrapper_are_learned(tmp_path: Path) -> None:
    def unwrapped(text: str, _request: Request) -> str:
        data = json.loads(text)
        return json.dumps({"reasoning": "r", "edits": data["patch"]["edits"]})

    with FakeModelServer(reply_fn=demo_reply_fn(unwrapped)) as server:
        done = train(tmp_path, server)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert summary["total_accepts"] >= 1
    assert summary["best_gate_score"] > summary["baseline_gate_score"]


@pytest.mark.slow
def test_a_run_whose_every_update_failed_exits_1_naming_the_stage(tmp_path: Path) -> None:
    def unusable(_text: str, request: Request) -> str:
        if len(request.body.get("messages", [])) > 1:  # the retry
            return "Sorry, I cannot produce that."
        return json.dumps({"suggestions": ["Give the bare number."]})

    with FakeModelServer(reply_fn=demo_reply_fn(unusable)) as server:
        done = train(tmp_path, server)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "the run failed during analyst" in done.stderr
    assert "patch: Field required" in done.stderr  # the real cause, not only the retry's
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert summary["status"] == "failed" and summary["failed_stage"] == "analyst"
    assert summary["total_accepts"] == 0
    history = json.loads((tmp_path / "run/history.json").read_text())
    assert all(h["update_failed"]["stage"] == "analyst" for h in history)
