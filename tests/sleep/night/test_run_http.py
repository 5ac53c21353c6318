"""Whole nights against real HTTP: the fake model server on 127.0.0.1 playing the world."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from skillopt.backends.mock import World
from skillopt.logging import configure_logging
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.entry import NightResult, run_night
from skillopt_sleep.rundir import RunStatus
from support.fake_model_server import FakeModelServer, Reply
from support.sleep_setup import http_config
from support.transcripts import append_to_first_prompts
from support.world_http import world_reply

HARMFUL = next(r for r in World().rules if r.harmful)
SECRET = "ghp_" + "Zq7" * 12


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DemoSetup:
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "test-key-not-secret")
    return prepare_demo(tmp_path)


@pytest.mark.slow
async def test_http_night_learns_and_leaks_nothing(setup: DemoSetup) -> None:
    append_to_first_prompts(setup.claude_home, f"(token {SECRET})")
    logs = io.StringIO()
    configure_logging(stream=logs, json=True, level="DEBUG")
    with FakeModelServer(reply_fn=world_reply) as server:
        outcome = await run_night(http_config(setup, server, folds=2), project=setup.project)
        requests = list(server.requests)
    assert outcome.status is RunStatus.COMPLETE and outcome.result is NightResult.ACCEPTED
    report = json.loads((outcome.run_dir / "report.json").read_text())
    accepted = {e["content"] for e in report["accepted_edits"]}
    proposed = {e["content"] for e in report["proposed_edits"]}
    assert HARMFUL.text not in accepted
    assert HARMFUL.text not in proposed or HARMFUL.text in {
        e["content"] for e in report["rejected_edits"]
    } | {c["edit"]["content"] for c in report["untested_edits"]}
    assert {r.member for r in requests} == {"m1", "m2"}
    assert all("skillopt" in r.user_text.lower()[:200] for r in requests)
    blobs = [r.raw_body for r in requests] + [logs.getvalue().encode()]
    blobs += [p.read_bytes() for p in setup.state_dir.rglob("*") if p.is_file()]
    assert not any(SECRET.encode() in b for b in blobs)
    assert any(b"[REDACTED:github_token]" in r.raw_body for r in requests)
    attempts = [r for r in requests if "Project notes" in r.user_text]
    assert len(attempts) >= report["tasks"]["learnable"]


async def test_endpoint_that_always_fails_is_exit_1(setup: DemoSetup) -> None:
    with FakeModelServer(rule=lambda _: Reply(status=500)) as server:
        outcome = await run_night(http_config(setup, server), project=setup.project)
    assert outcome.status is RunStatus.FAILED and outcome.exit_code == 1
    assert outcome.failed_stage == "rollouts"
    diag = json.loads((outcome.run_dir / "diagnostics.json").read_text())
    groups = diag["rollout_errors"]  # one group per (member, stage, class), not per message
    assert {(g["member"], g["error_class"]) for g in groups} <= {("m1", "server"), ("m2", "server")}
    assert all("500" in g["example"] for g in groups)
    assert "500" in json.dumps(diag["pool"]) or diag["spend"]["failures"] > 0
