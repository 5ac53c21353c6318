"""An endpoint that dies after the first wave fails the night (exit 1), naming the stage.

Before: the failed trials or reflections read as "rejected" / "no edits" with exit 0, so a
scheduler never saw the outage.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from skillopt.config import PoolConfig
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, demo_pool, prepare_demo
from skillopt_sleep.night.entry import NightOutcome, run_night
from skillopt_sleep.rundir import RunStatus
from skillopt_sleep.state import StateStore
from support.fake_model_server import FakeModelServer, Reply, Request
from support.sleep_setup import one_member_night
from support.world_http import world_reply


@pytest.fixture
def demo(tmp_path: Path) -> DemoSetup:
    return prepare_demo(tmp_path)


def _failing(demo: DemoSetup, *stages: str) -> object:
    pool = demo_pool().model_dump(mode="json")
    pool["members"][0]["options"] = {"fail_stages": list(stages)}
    pool["retry"] = {"max_attempts": 1, "base_delay": 0}
    data = demo.config.model_dump(mode="json")
    data["pool"] = PoolConfig.model_validate(pool).model_dump(mode="json")
    data["budget"]["outage_patience_seconds"] = 0  # a lasting outage: fail, do not wait it out
    return type(demo.config).model_validate(data)


def _assert_failed(outcome: NightOutcome, demo: DemoSetup, stage: str, cause: str) -> None:
    assert outcome.status is RunStatus.FAILED and outcome.exit_code == 1, outcome.result
    assert outcome.failed_stage == stage and cause in outcome.reason, outcome.reason
    assert outcome.run_dir is not None
    diag = json.loads((outcome.run_dir / "diagnostics.json").read_text())
    assert diag["failed_stage"] == stage
    assert not StateStore(demo.config.state_path()).load(demo.project).history


async def test_optimizer_outage_at_reflection_fails_the_night(demo: DemoSetup) -> None:
    cfg = _failing(demo, "reflect", "reflect_contrastive")
    outcome = await run_night(cfg, project=demo.project)  # type: ignore[arg-type]
    _assert_failed(outcome, demo, "round1.reflect_skill", "every reflection call failed")
    assert "configured to fail" in outcome.reason


async def test_endpoint_dying_after_reflection_fails_the_night(
    demo: DemoSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "k")
    dead = threading.Event()

    def rule(request: Request) -> Reply | None:
        if dead.is_set():
            return Reply(status=500)
        text = request.user_text
        if "# Failed tasks" in text or "# Attempt groups" in text:
            dead.set()  # this reply still goes out; every later call fails
        return None

    with FakeModelServer(reply_fn=world_reply, rule=rule) as server:
        data = one_member_night(
            demo, server, max_concurrency=8, max_attempts=1, failure_threshold=1000
        )
        outcome = await run_night(SleepConfig.model_validate(data), project=demo.project)
    assert dead.is_set()
    _assert_failed(outcome, demo, "round1.trial_skill", "every model call failed")
