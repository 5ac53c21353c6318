"""The estimate said again once round 1's reflections proposed their edits (issue 31 item 4).

Most of a first night's estimate is the gate's: a trial per edit, the union, the final check
and their judging. A night whose reflection proposes no edit runs none of it (the small real
model's nights spent 16-21 calls against ~130 said). Once the round's reflections answered,
before any trial, the estimate is revised to what is left; a budget warning the first
figure raised is taken back when the revision fits the budget."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import structlog

from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.night.estimate import gate_floor
from skillopt_sleep.stage_rates import NightRecord
from skillopt_sleep.state import project_dir
from skillopt_sleep.token_model import TokenModel
from support.fake_model_server import FakeModelServer, Reply, Request
from support.sleep_setup import http_config
from support.world_http import world_reply

WARNING = "the budget will cut this night short"
TAKEN_BACK = "the revised estimate fits the budget: the warning no longer holds"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "test-key-not-secret")


def no_edits(request: Request) -> Reply | None:
    """Reflection answers with no edit (as the 135M model's did); the rest is the world's."""
    format_ = request.body.get("response_format") or {}
    if (format_.get("json_schema") or {}).get("name") == "edits":
        return Reply(text=json.dumps({"edits": []}))
    return None


def _config(demo: DemoSetup, server: FakeModelServer, **budget: int) -> SleepConfig:
    """A first try of a greedy local model: a handful of tasks, one sample, one round."""
    data = http_config(demo, server, llm_mine=False, max_tasks=4, dream_rollouts=1,
                       rounds=1).model_dump(mode="json")  # fmt: skip
    for member in data["pool"]["members"]:
        member["request"] = {"target": {"temperature": 0.0}}
    data["budget"].update(budget)
    return SleepConfig.model_validate(data)


async def _night(demo: DemoSetup, server: FakeModelServer, **budget: int) -> dict[str, Any]:
    outcome = await run_night(_config(demo, server, **budget), project=demo.project)
    assert outcome.run_dir is not None
    report: dict[str, Any] = json.loads((outcome.run_dir / "report.json").read_text())
    return report


def _recorded(demo: DemoSetup) -> NightRecord:
    """The night the project's spend model recorded last."""
    where = project_dir(demo.config.state_path(), demo.project)
    return TokenModel.load(where).nights[-1]


async def test_a_night_whose_reflection_proposes_nothing_is_revised_to_its_spend(
    tmp_path: Path,
) -> None:
    """Before: the first figure (the gate's trials, union and final check priced in) was
    the only one said, several times the night's spend."""
    demo = prepare_demo(tmp_path)
    with FakeModelServer(reply_fn=world_reply, rule=no_edits) as server:
        report = await _night(demo, server)
    detail, spent = report["estimate_detail"], int(report["spend"]["calls"])
    assert report["result"] == "no_edits" and "trial" not in report["spend"]["calls_by_stage"]
    assert detail["calls"] > 2 * spent  # the first figure priced a gate that never ran
    revised = detail["revised"]
    assert revised["after"] == "round 1's reflections" and revised["edits"] == 0
    assert spent / 2 <= revised["calls"] <= 2 * spent, (revised, spent)
    assert not {"trial", "union", "final"} & set(revised["by_stage"])
    assert detail["revisions"] == [{"after": "round 1's reflections", "calls": revised["calls"]}]
    line = next(n for n in report["notes"] if n.startswith("revised estimate after round 1"))
    assert "no edit proposed" in line
    assert f"about {revised['calls']} model calls in all (was {detail['calls']})" in line
    assert _recorded(demo).edits == 0  # the next night's estimate learns it


async def test_the_budget_warning_said_first_is_taken_back(tmp_path: Path) -> None:
    """A cap under the first figure but over the revised one: the warning said with the
    first figure goes from the notes, and the progress line says it no longer holds."""
    with FakeModelServer(reply_fn=world_reply, rule=no_edits) as server:
        said = (await _night(prepare_demo(tmp_path / "uncapped"), server))["estimate_detail"]
        cap = (said["calls"] + said["revised"]["calls"]) // 2
        with structlog.testing.capture_logs() as logs:
            report = await _night(prepare_demo(tmp_path / "capped"), server, max_calls=cap)
    detail = report["estimate_detail"]
    assert detail["revised"]["calls"] <= cap < detail["calls"]
    told = [e["message"] for e in logs if e["event"] == "night.note"]
    assert any(WARNING in note for note in told), told  # said with the first figure
    assert TAKEN_BACK in told, told
    assert not any(WARNING in note for note in report["notes"]), report["notes"]
    assert detail["budget_warning"] == ""
    assert report["result"] == "no_edits"


async def test_the_first_figure_of_a_night_whose_reflection_proposes_nothing_holds_its_spend(
    tmp_path: Path,
) -> None:
    """A first night (nothing measured: the gate priced on the prior) says a range before
    its first call, whose low end is the night without a gate. Before: one figure, the
    prior's gate priced in (x8-x11 the spend of the small real model's nights, x5 here)."""
    with FakeModelServer(reply_fn=world_reply, rule=no_edits) as server:
        report = await _night(prepare_demo(tmp_path), server)
    detail, spent = report["estimate_detail"], int(report["spend"]["calls"])
    floor = detail.get("floor")
    assert floor is not None and spent / 2 <= floor <= 2 * spent, (detail, spent)
    assert f"between {floor} and {detail['calls']} model calls" in report["estimate"]


async def test_the_first_range_holds_a_night_whose_gate_runs(tmp_path: Path) -> None:
    """The same first night with reflection proposing edits the gate tries: the spend lies
    within x2 of the range said before the first call (its high end: the gate priced in)."""
    with FakeModelServer(reply_fn=world_reply) as server:
        report = await _night(prepare_demo(tmp_path), server)
    detail, spent = report["estimate_detail"], int(report["spend"]["calls"])
    assert "trial" in report["spend"]["calls_by_stage"], report["spend"]
    assert detail["floor"] < spent and spent / 2 <= detail["calls"] <= 2 * spent, (detail, spent)


def test_the_floor_is_the_night_without_its_gate() -> None:
    """Trials, union, attributions and final check out, judging in proportion to what it
    judged of the stages left; the test split stays (it is scored whatever the gate did)."""
    said = {"mine": 2, "rollout": 10, "reflect": 3, "trial": 40, "union": 20, "attribution": 5,
            "final": 5, "test": 10, "judge": 45}  # fmt: skip
    assert gate_floor(said) == 2 + 10 + 3 + 10 + round(45 * 20 / 90)
    assert gate_floor({"rollout": 4, "reflect": 2}) == 6
