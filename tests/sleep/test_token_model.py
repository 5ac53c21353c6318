"""Token accounting per member: the pre-night estimate is priced from what earlier calls
and nights measured, says when the budget will cut the night short, and tokens a member
did not report are marked as estimated.

Before: every call was priced at a flat 900 tokens, so a codex night (~5k tokens of the
CLI's own prompt per call) counted 887k tokens against an estimate of 239k, and the
default budget stopped it without a word up front.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.entry import NightResult, run_night
from skillopt_sleep.state import project_dir
from skillopt_sleep.token_model import (
    CLI_PRIOR,
    FILE_NAME,
    HTTP_PRIOR,
    WINDOW,
    Measured,
    TokenModel,
    budget_warning,
    call_kind,
)
from support.fake_model_server import FakeModelServer, Reply, Request
from support.world_http import world_reply

HEAVY = (5400, 120)  # prompt, completion: a CLI-sized call


def _config(setup: DemoSetup, server: FakeModelServer, **budget: Any) -> SleepConfig:
    data = setup.config.model_dump(mode="json")
    data["night"]["llm_mine"] = False
    data["budget"].update(budget)
    data["pool"] = {
        "members": [{"kind": "openai", "name": "heavy", "base_url": server.url("heavy"),
                     "model": "fake", "api_key_env": "SKILLOPT_TEST_FAKE_KEY",
                     "max_concurrency": 8, "timeout": 30}],
        "roles": {"target": ["heavy"], "optimizer": ["heavy"]},
        "cache": {"enabled": False},
    }  # fmt: skip
    return SleepConfig.model_validate(data)


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DemoSetup:
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "test-key-not-secret")
    return prepare_demo(tmp_path)


def _usage(tokens: tuple[int, int] | None) -> Callable[[Request], Reply]:
    """Every reply reports ``tokens`` as its usage (``None``: no usage at all)."""
    return lambda request: Reply(usage=tokens)


def _report(outcome: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((outcome.run_dir / "report.json").read_text())
    return data


@pytest.mark.slow
async def test_the_second_night_is_priced_from_what_the_first_measured(setup: DemoSetup) -> None:
    with FakeModelServer(reply_fn=world_reply, rule=_usage(HEAVY)) as server:
        first = await run_night(_config(setup, server), project=setup.project)
        spent = first.spend["tokens"] / first.spend["calls"]
        assert spent == pytest.approx(sum(HEAVY))
        saved = TokenModel.load(project_dir(setup.state_dir, setup.project))
        assert saved.members["heavy"]["attempt"].per_call == pytest.approx(sum(HEAVY))
        # a budget that holds only part of what the night will now be estimated to use
        budget = int(first.spend["tokens"] * 0.5)
        second = await run_night(_config(setup, server, max_tokens=budget), project=setup.project)
    first_detail = _report(first)["estimate_detail"]
    assert first_detail["sources"] == {"heavy": "prior"}  # nothing measured yet
    detail = _report(second)["estimate_detail"]
    assert detail["sources"] == {"heavy": "measured"}
    assert detail["tokens"] / detail["calls"] == pytest.approx(sum(HEAVY), rel=0.05)
    warning = detail["budget_warning"]
    assert f"budget.max_tokens = {budget}" in warning and "cut this night short" in warning
    assert warning in _report(second)["notes"]
    assert second.result is NightResult.BUDGET_REACHED
    assert "of them estimated" not in (second.run_dir / "report.md").read_text()


@pytest.mark.slow
async def test_tokens_a_member_did_not_report_are_marked_estimated(setup: DemoSetup) -> None:
    with FakeModelServer(reply_fn=world_reply, rule=_usage(None)) as server:
        outcome = await run_night(_config(setup, server), project=setup.project)
    assert outcome.spend["estimated_tokens"] == outcome.spend["tokens"] > 0
    spend = (outcome.run_dir / "report.md").read_text().split("## Spend")[1]
    assert "estimated (a member reported no usage)" in spend
    saved = json.loads((project_dir(setup.state_dir, setup.project) / FILE_NAME).read_text())
    attempt = saved["members"]["heavy"]["attempt"]
    assert attempt["estimated"] == attempt["tokens"]


def test_an_estimated_or_unmeasured_cli_is_never_priced_below_its_prior() -> None:
    model = TokenModel()
    assert model.per_call("copilot", "attempt", "copilot") == (CLI_PRIOR, "prior")
    model.observe({("copilot", "rollout"): (10, 3000, 3000)})  # counted from text: 300/call
    assert model.per_call("copilot", "attempt", "copilot") == (CLI_PRIOR, "estimated")
    model.observe({("codex", "rollout"): (10, 60_000, 0)})
    assert model.per_call("codex", "attempt", "codex") == (6000, "measured")
    assert model.per_call("codex", "judge", "codex") == (6000, "measured")  # any kind


def test_mining_calls_do_not_price_the_other_kinds() -> None:
    """A first night has measured only its mining (batched sessions, thousands of tokens a
    call) when it estimates: its attempts are priced by the prior, not like mining calls."""
    model = TokenModel()
    model.observe({("m0", "mine"): (8, 21_000, 0)})
    assert model.per_call("m0", "attempt", "openai") == (HTTP_PRIOR, "prior")
    assert model.per_call("m0", "mine", "openai") == (2625, "measured")


def test_the_model_keeps_a_window_of_recent_calls() -> None:
    measured = Measured()
    measured.add(WINDOW, WINDOW * 1000, 0)
    measured.add(WINDOW, WINDOW * 3000, 0)
    assert measured.calls == WINDOW and measured.per_call == pytest.approx(2000)


def test_call_kinds_and_budget_warnings() -> None:
    assert [call_kind(s) for s in ("rollout", "final", "judge", "reflect", "mine")] == [
        "attempt", "attempt", "judge", "reflect", "mine",
    ]  # fmt: skip
    assert budget_warning(calls=100, tokens=90_000, max_calls=0, max_tokens=100_000) == ""
    said = budget_warning(calls=1000, tokens=5_000_000, max_calls=5000, max_tokens=4_000_000)
    assert "about 800 of the 1000 estimated calls" in said
    said = budget_warning(calls=1000, tokens=10, max_calls=600, max_tokens=0)
    assert "budget.max_calls = 600" in said and "about 600" in said
