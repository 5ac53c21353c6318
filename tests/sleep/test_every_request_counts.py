"""Every request the pool sends counts: the budget, the ledger and the report.

A night runs against the fake OpenAI server on 127.0.0.1 playing the demo world, the server
counting every request it receives and the tokens its replies report. Some requests are
answered badly first: garbage where a verdict, edits or mined tasks were asked (the pool or
the caller asks again), a 500, a 429. Each such request is a full billable request: the
night's report, ledger and run journal must say exactly what the server counted. And a cap
is a cap: a retry that would cross ``budget.max_calls`` is never sent.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from skillopt_sleep.config import BudgetSettings
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.rundir import RunStatus
from support.fake_model_server import FakeModelServer, Reply, Request
from support.sleep_setup import http_config
from support.world_http import world_reply

GARBAGE = "Sure! Here is what I think: it looks fine to me."


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DemoSetup:
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "test-key-not-secret")
    return prepare_demo(tmp_path)


class Faulty:
    """The demo world, but the first request of every ``every``-th new prompt gets ``fault``
    (its retry, the same prompt again, is answered); counts what it served."""

    def __init__(self, fault: Callable[[Request], Reply], every: int = 3) -> None:
        self.fault = fault
        self.every = every
        self.lock = threading.Lock()
        self.prompts: Counter[str] = Counter()
        self.seen: Counter[str] = Counter()

    def __call__(self, request: Request) -> Reply:
        text = json.dumps(request.body.get("messages"))
        with self.lock:
            self.prompts[text] += 1
            first = self.prompts[text] == 1
            faulted = first and len(self.prompts) % self.every == 0
            reply = self.fault(request) if faulted else Reply(text=world_reply(request))
            self.seen["requests"] += 1
            self.seen["faults"] += faulted
            if reply.status == 200 and reply.usage is not None:
                self.seen["tokens"] += sum(reply.usage)
                self.seen["answered"] += 1
        return reply


def _garbage(request: Request) -> Reply:
    return Reply(text=GARBAGE, usage=(40, 12))


def _server_errors(request: Request) -> Reply:
    status = 500 if len(json.dumps(request.body)) % 2 else 429
    return Reply(status=status, headers={"retry-after": "0"})


@pytest.mark.parametrize("fault", [_garbage, _server_errors], ids=["garbage", "500-429"])
async def test_the_report_counts_every_request_the_server_received(
    setup: DemoSetup, fault: Callable[[Request], Reply]
) -> None:
    provider = Faulty(fault)
    with FakeModelServer(rule=provider) as server:
        config = http_config(setup, server, folds=2)
        outcome = await run_night(config, project=setup.project)
        received = len(server.requests)
    assert outcome.status is RunStatus.COMPLETE
    seen = provider.seen
    assert seen["faults"] > 0 and received == seen["requests"]
    report = json.loads((outcome.run_dir / "report.json").read_text())
    diagnostics = json.loads((outcome.run_dir / "diagnostics.json").read_text())
    spend, ledger = report["spend"], report["ledger"]
    assert (spend["calls"], spend["tokens"]) == (received, seen["tokens"])
    assert (ledger["calls"], ledger["tokens"]) == (received, seen["tokens"])
    assert sum(row["calls"] for row in ledger["stages"].values()) == received
    assert sum(row["tokens"] for row in ledger["stages"].values()) == seen["tokens"]
    pool = diagnostics["pool"]["total"]
    assert pool["attempts"] == received
    assert pool["prompt_tokens"] + pool["completion_tokens"] == seen["tokens"]
    run = json.loads((outcome.run_dir / "run.json").read_text())
    assert sum(s.get("model_calls", 0) for s in run["stages"]) == received
    if fault is _server_errors:
        assert spend["failures"] == seen["faults"]


async def test_a_retry_that_would_cross_the_call_cap_is_not_sent(setup: DemoSetup) -> None:
    """Garbage for every judge request: each verdict is asked again, and the night stops at
    ``max_calls`` requests exactly, the retry that would cross it never sent."""

    def rule(request: Request) -> Reply:
        if "# What a good answer does" in request.user_text:
            return Reply(text=GARBAGE)
        return Reply(text=world_reply(request))

    with FakeModelServer(rule=rule) as server:
        config = http_config(setup, server, folds=2)
        config = config.model_copy(update={"budget": BudgetSettings(max_calls=40)})
        outcome = await run_night(config, project=setup.project)
        received = len(server.requests)
    report = json.loads((outcome.run_dir / "report.json").read_text())
    assert received == report["spend"]["calls"] == 40
    assert report["spend"]["budget_reached"] == "calls"
