"""Diagnostics group failed calls by member, stage and error class, one example each.

Issue 11 item 19: rollout errors were counted by their full message, which carries
"next probe in 29.xs", so one cause (every circuit open) showed as many entries. A night
against an endpoint that always answers 500, with circuits that open after ten failures,
now shows one group per (member, stage, class), and a resumed night rebuilds the same
groups from ``rollouts.jsonl``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt.atomicio import read_jsonl
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.replay import Replayer
from skillopt_sleep.rundir import ROLLOUTS, RunStatus
from support.fake_model_server import FakeModelServer, Reply
from support.sleep_setup import http_config


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DemoSetup:
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "test-key-not-secret")
    return prepare_demo(tmp_path)


def quick_breakers(cfg: SleepConfig) -> SleepConfig:
    data = cfg.model_dump(mode="json")
    data["pool"]["breaker"] = {"failure_threshold": 10, "cooldown": 30.0}
    data["budget"]["outage_patience_seconds"] = 0  # a lasting outage: fail, do not wait it out
    return SleepConfig.model_validate(data)


async def test_one_cause_is_one_group_with_an_example(setup: DemoSetup) -> None:
    with FakeModelServer(rule=lambda _: Reply(status=500)) as server:
        cfg = quick_breakers(http_config(setup, server, llm_mine=False))
        outcome = await run_night(cfg, project=setup.project)
    assert outcome.status is RunStatus.FAILED and outcome.run_dir is not None
    diag = json.loads((outcome.run_dir / "diagnostics.json").read_text())
    groups = diag["rollout_errors"]
    keys = [(g["member"], g["stage"], g["error_class"]) for g in groups]
    assert len(keys) == len(set(keys))
    open_circuit = [g for g in groups if g["error_class"] == "NoHealthyMemberError"]
    assert open_circuit and {g["stage"] for g in open_circuit} <= {"baseline", "rollout"}
    assert len(open_circuit) <= 2  # one per stage, however the probe countdown read
    assert all("next probe in" in g["example"] for g in open_circuit)
    assert all(g["member"] == "" for g in open_circuit)
    rows = list(read_jsonl(outcome.run_dir / ROLLOUTS))
    assert sum(g["count"] for g in groups) == sum(1 for r in rows if r.get("error"))
    # a resumed night runs the failed calls again (it pays only for calls that never
    # answered), so their groups are counted afresh, not carried over twice
    resumed = Replayer(pool=None, marker="")  # type: ignore[arg-type]
    resumed.preload(rows)
    assert resumed.errors.to_list() == [] and not any(r.error for r in resumed.done.values())
