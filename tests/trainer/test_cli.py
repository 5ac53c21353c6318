"""`skillopt train` / `skillopt eval` as real subprocesses, including SIGKILL and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs/trainer/qa_demo.toml"


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "skillopt.cli", *args]


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli(*args), capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False
    )


def train_args(out: Path, *, latency: float) -> list[str]:
    """`train` on the demo config into ``out``, with the demo model's per-call latency."""
    return [
        "train",
        "--config",
        str(DEMO),
        "--set",
        f"out_root={json.dumps(str(out))}",
        "--set",
        f"backend.demo_latency_s={latency}",
    ]


def strip_tokens(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Token counts are what this process spent; a resumed step reuses saved work."""
    return [{k: v for k, v in rec.items() if k != "tokens"} for rec in history]


def test_train_says_where_its_run_and_best_skill_are(tmp_path: Path) -> None:
    out = tmp_path / "run"
    small = (
        "train.num_epochs=1",
        "env.limit=6",
        "train.batch_size=6",
        "evaluation.eval_test=false",
    )
    done = run_cli(*train_args(out, latency=0.0), *(a for s in small for a in ("--set", s)))
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"run directory: {out} " in done.stdout
    assert f"best skill: {out / 'best_skill.md'}" in done.stdout
    assert (out / "best_skill.md").is_file()


@pytest.mark.slow
def test_train_demo_shows_the_gate_in_its_summary(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_cli("train", "--config", str(DEMO), "--set", f"out_root={json.dumps(str(out))}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "accepted" in done.stdout and "rejected" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["total_rejects"] >= 1 and summary["total_accepts"] >= 1
    assert summary["best_gate_score"] > summary["baseline_gate_score"]
    assert summary["token_summary"]["rollout"]["calls"] > 0
    timing = json.loads((out / "timing.json").read_text())
    assert timing["pool_accounting"]["by_stage"]["analyst"]["calls"] > 0


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_history(tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    ok = run_cli(
        "train",
        "--config",
        str(DEMO),
        "--set",
        f"out_root={json.dumps(str(reference))}",
        "--set",
        "backend.demo_latency_s=0",
    )
    assert ok.returncode == 0, ok.stderr[-2000:]

    out = tmp_path / "killed"
    args = train_args(out, latency=0.05)
    proc = subprocess.Popen(
        cli(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    deadline = time.monotonic() + 60
    killed_after: int | None = None
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if time.monotonic() > deadline:
                break
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("event") == "step_done" and event.get("step") == 2:
                os.kill(proc.pid, signal.SIGKILL)
                killed_after = 2
                break
    finally:
        proc.wait(timeout=30)
        proc.stderr.close()
    assert killed_after == 2 and proc.returncode == -signal.SIGKILL
    state = json.loads((out / "runtime_state.json").read_text())
    # at least step 2; how many more finished before the kill landed depends on the load
    assert state["last_completed_step"] >= 2
    resumed = run_cli(*args)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert '"event": "resume"' in resumed.stderr
    assert '"event": "baseline_start"' not in resumed.stderr  # baseline only once
    ref_hist = json.loads((reference / "history.json").read_text())
    got_hist = json.loads((out / "history.json").read_text())
    assert strip_tokens(got_hist) == strip_tokens(ref_hist)
    for name in ("best_skill.md", "runtime_state.json"):
        assert (out / name).read_bytes() == (reference / name).read_bytes()


def test_config_errors_exit_2_naming_the_key(tmp_path: Path) -> None:
    bad = run_cli("train", "--config", str(DEMO), "--set", "train.epochs=3")
    assert bad.returncode == 2
    assert "train.epochs" in bad.stderr
    missing = run_cli("train", "--config", str(tmp_path / "nope.toml"))
    assert missing.returncode == 2 and "nope.toml" in missing.stderr


def test_eval_scores_a_skill_on_a_split(tmp_path: Path) -> None:
    skill = tmp_path / "skill.md"
    skill.write_text("For a yes/no question, answer with the single word yes or no.\n")
    done = run_cli(
        "eval",
        "--config",
        str(DEMO),
        "--skill",
        str(skill),
        "--split",
        "val",
        "--out",
        str(tmp_path / "eval"),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["split"] == "val" and report["n"] == 30
    assert report["per_task_type"]["yesno"]["hard_acc"] == 1.0
    assert report["per_task_type"]["count"]["hard_acc"] == 0.0
    bad = run_cli("eval", "--config", str(DEMO), "--skill", str(skill), "--split", "dev")
    assert bad.returncode == 2 and "dev" in bad.stderr


@pytest.mark.slow
def test_sigint_stops_cleanly_and_the_run_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = train_args(out, latency=0.05)
    proc = subprocess.Popen(
        cli(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if '"step_done"' in line:
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.stderr.read()
    proc.wait(timeout=30)
    proc.stderr.close()
    assert proc.returncode == 130, rest[-2000:]
    assert "resume" in rest
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((out / "summary.json").read_text())["total_steps"] == 6


@pytest.mark.slow
def test_relative_out_root_from_another_directory(tmp_path: Path) -> None:
    """The demo config's own relative out_root, run from the user's working directory."""
    done = subprocess.run(
        cli("train", "--config", str(DEMO), "--set", "backend.demo_latency_s=0"),
        capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "outputs/qa_demo/summary.json").read_text())
    assert summary["best_gate_score"] > summary["baseline_gate_score"]
