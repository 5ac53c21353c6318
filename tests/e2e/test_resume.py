"""Kill a real `skillopt-sleep once` with SIGKILL at several stages; the next run resumes
to the same decision as an uninterrupted night."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.entry import run_night
from support.sleep_setup import MOCK_POOL, once, write_config

pytestmark = pytest.mark.slow


def decision(report: dict[str, Any]) -> tuple[Any, ...]:
    return (
        report["result"],
        report["gate_action"],
        report["baseline"],
        report["candidate"],
        sorted(e["content"] for e in report["accepted_edits"]),
        sorted(e["content"] for e in report["rejected_edits"]),
    )


@pytest.fixture
def setup(tmp_path: Path) -> DemoSetup:
    return prepare_demo(tmp_path)


async def reference(setup: DemoSetup) -> tuple[Any, ...]:
    outcome = await run_night(setup.config, project=setup.project)
    assert outcome.run_dir is not None
    result = decision(json.loads((outcome.run_dir / "report.json").read_text()))
    shutil.rmtree(setup.state_dir)
    return result


@pytest.mark.parametrize(
    "kill_after",
    ["rollouts=25", "round1.trial_skill", "final"],
)
async def test_killed_night_resumes_to_the_same_decision(setup: DemoSetup, kill_after: str) -> None:
    expected = await reference(setup)
    config = write_config(setup)
    killed = once(config, setup.project, kill_after)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    runs = list((setup.state_dir / "projects").glob("*/runs/*/run.json"))
    assert len(runs) == 1 and json.loads(runs[0].read_text())["status"] == "running"
    resumed = once(config, setup.project)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    out = json.loads(resumed.stdout)
    assert out["resumed"] is True and out["run_dir"] == str(runs[0].parent)
    report = json.loads((runs[0].parent / "report.json").read_text())
    assert decision(report) == expected
    assert report["reused_rollouts"] > 0
    assert json.loads(runs[0].read_text())["status"] == "complete"


async def test_changed_config_aborts_the_interrupted_night(setup: DemoSetup) -> None:
    config = write_config(setup)
    assert once(config, setup.project, "rollouts").returncode == -signal.SIGKILL
    config.write_text(config.read_text().replace("edit_budget = 4", "edit_budget = 3"))
    fresh = once(config, setup.project)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    runs = sorted((setup.state_dir / "projects").glob("*/runs/*/run.json"))
    assert len(runs) == 2
    first = json.loads(runs[0].read_text())
    assert first["status"] == "aborted" and "configuration changed" in first["reason"]
    assert json.loads(fresh.stdout)["resumed"] is False


async def test_interrupt_exits_130_and_the_night_resumes(setup: DemoSetup) -> None:
    config = write_config(setup)
    interrupted = once(config, setup.project, "sigint:round1.reflect_skill")
    assert interrupted.returncode == 130, interrupted.stderr[-2000:]
    (run_json,) = (setup.state_dir / "projects").glob("*/runs/*/run.json")
    journal = json.loads(run_json.read_text())
    assert journal["status"] == "aborted" and journal["resumable"] is True
    resumed = once(config, setup.project)
    assert resumed.returncode == 0 and json.loads(resumed.stdout)["resumed"] is True
    assert json.loads(run_json.read_text())["status"] == "complete"


def test_sigterm_aborts_the_night_resumably(setup: DemoSetup) -> None:
    """A systemd stop sends SIGTERM: the run is marked aborted + resumable, exit 130."""
    slow_pool = MOCK_POOL.replace(
        "max_concurrency = 16", "max_concurrency = 4\noptions = { latency = 0.05 }"
    )
    config = write_config(setup, pool=slow_pool)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLOPT_SLEEP__")}
    env["HOME"] = str(config.parent)
    proc = subprocess.Popen(
        [sys.executable, "-m", "skillopt_sleep", "once", "--json",
         "--config", str(config), "--project", str(setup.project)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    run_json: Path | None = None
    while time.monotonic() < deadline and run_json is None:
        found = list((setup.state_dir / "projects").glob("*/runs/*/rollouts.jsonl"))
        run_json = found[0].parent / "run.json" if found else None
        time.sleep(0.05)
    assert run_json is not None, "the night never started replaying"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err[-2000:]
    record = json.loads(run_json.read_text())
    assert record["status"] == "aborted"
    assert json.loads(out)["error"] == "interrupted"
    resumed = once(config, setup.project)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads(resumed.stdout)["resumed"] is True
    assert json.loads(run_json.read_text())["status"] == "complete"


async def test_status_shows_a_killed_night_as_interrupted(setup: DemoSetup) -> None:
    from skillopt_sleep.lock import project_lock

    config = write_config(setup)
    assert once(config, setup.project, "rollouts").returncode == -signal.SIGKILL
    argv = [sys.executable, "-m", "skillopt_sleep", "status", "--json", "--config",
            str(config), "--project", str(setup.project)]  # fmt: skip

    def status() -> dict[str, Any]:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        recent: dict[str, Any] = json.loads(done.stdout)["recent"][-1]
        return recent

    dead = status()
    assert dead["status"] == "interrupted" and "next night resumes" in dead["reason"]
    with project_lock(setup.state_dir, setup.project, command="once"):  # a live holder
        assert status()["status"] == "running"
