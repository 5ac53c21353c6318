"""One task whose calls always fail is set aside; the night finishes on the rest.

Before: the night kept asking for that task on every decision (each call retried), and
its failures held the member's breaker open for every other task, so a night on a real
endpoint spent its budget and its outage patience and staged nothing. Now the task's
calls stop after a few failures in a row, the night decides on the others, and the
report and ``status`` name the task as set aside.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from skillopt_sleep.cli import main
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import prepare_demo
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.replay import SET_ASIDE_AFTER
from skillopt_sleep.rundir import RunStatus
from support.fake_model_server import FakeModelServer, Reply, Request
from support.sleep_setup import one_member_night, write_config
from support.world_http import world_reply

BROKEN = "Rename the fetch_all helper"
ATTEMPTS = 2  # the pool's tries per call
CONCURRENCY = 4


@pytest.mark.slow
async def test_a_task_whose_calls_always_fail_is_set_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "k")
    demo = prepare_demo(tmp_path)
    broken_calls = 0
    lock = threading.Lock()

    def rule(request: Request) -> Reply | None:
        nonlocal broken_calls
        text = request.user_text
        reflecting = "# Failed tasks" in text or "# Attempt groups" in text
        if BROKEN in text and not reflecting:
            with lock:
                broken_calls += 1
            return Reply(status=500)
        return None

    with FakeModelServer(reply_fn=world_reply, rule=rule) as server:
        data = one_member_night(
            demo, server, max_concurrency=CONCURRENCY, max_attempts=ATTEMPTS,
            failure_threshold=5, cooldown=0.2,
        )  # fmt: skip
        cfg = SleepConfig.model_validate(data)
        outcome = await run_night(cfg, project=demo.project)
    assert outcome.status is RunStatus.COMPLETE and outcome.exit_code == 0, outcome.reason
    assert outcome.run_dir is not None
    report = json.loads((outcome.run_dir / "report.json").read_text())
    aside = [row["task"] for row in report["set_aside"]]
    assert len(aside) == 1, report["set_aside"]
    assert BROKEN in report["task_intents"][aside[0]]
    assert "failed" in report["set_aside"][0]["why"]
    assert "Tasks set aside" in (outcome.run_dir / "report.md").read_text()
    # a few failures in a row, plus the calls already in flight when the task was set aside
    assert broken_calls <= (SET_ASIDE_AFTER + CONCURRENCY) * ATTEMPTS, broken_calls
    trials = json.loads((outcome.run_dir / "trials.json").read_text())["trials"]
    assert trials, "the night went on to decide on the other tasks"

    config_file = write_config(demo)  # the same state directory; status calls no model
    assert main(["status", "--config", str(config_file), "--project", str(demo.project)]) == 0
    assert aside[0] in capsys.readouterr().out
