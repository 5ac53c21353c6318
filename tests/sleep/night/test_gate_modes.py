"""`gate.mode` (strict / greedy / off) reaches the night, and a model change is flagged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skillopt.backends.mock import World
from skillopt.types import GateAction
from skillopt_sleep.cli import main
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.night.outcome import NightResult
from support.sleep_setup import write_config

HARMFUL = next(r for r in World().rules if r.harmful)


@pytest.fixture
def demo(tmp_path: Path) -> DemoSetup:
    return prepare_demo(tmp_path)


def _config(demo: DemoSetup, *, mode: str = "strict", model: str = "mock") -> SleepConfig:
    data = demo.config.model_dump(mode="json")
    data["gate"]["mode"] = mode
    data["pool"]["members"][0]["model"] = model
    return SleepConfig.model_validate(data)


def _report(outcome: Any) -> dict[str, Any]:
    return dict(json.loads((outcome.run_dir / "report.json").read_text()))


def _stages(outcome: Any) -> set[str]:
    journal = json.loads((outcome.run_dir / "run.json").read_text())
    return {s["name"] for s in journal["stages"]}


@pytest.mark.slow
async def test_greedy_skips_the_final_check_and_says_so(demo: DemoSetup) -> None:
    outcome = await run_night(_config(demo, mode="greedy"), project=demo.project)
    report = _report(outcome)
    assert outcome.result is NightResult.ACCEPTED
    assert report["gate_mode"] == "greedy"
    assert report["gate_action"] == GateAction.GREEDY_APPLIED.value
    assert "final" not in _stages(outcome) and any(
        s.startswith("round1.") for s in _stages(outcome)
    )
    assert HARMFUL.text not in {e["content"] for e in report["accepted_edits"]}  # trials ran
    assert "Gate mode **greedy**" in (outcome.run_dir / "report.md").read_text()


@pytest.mark.slow
async def test_off_keeps_every_edit_unvalidated_and_says_so(demo: DemoSetup) -> None:
    outcome = await run_night(_config(demo, mode="off"), project=demo.project)
    report = _report(outcome)
    assert outcome.result is NightResult.ACCEPTED
    assert report["gate_mode"] == "off" and report["gate_action"] == "greedy_applied"
    assert not any(s.startswith("round") or s == "final" for s in _stages(outcome))
    assert HARMFUL.text in {e["content"] for e in report["accepted_edits"]}  # nothing checked
    proposal = (outcome.run_dir / "proposal").glob("skill-*.md")
    assert any(HARMFUL.text in p.read_text() for p in proposal)
    markdown = (outcome.run_dir / "report.md").read_text()
    assert "Gate mode **off**" in markdown
    n_kept = len(report["accepted_edits"])
    assert "No edit was proposed" not in markdown and "held out once" not in markdown
    assert f"proposed {n_kept} edit(s) that applied" in markdown and "none validated" in markdown
    assert "Gate mode off" in (outcome.run_dir / "report.html").read_text()


@pytest.mark.slow
async def test_strict_is_the_default_and_unlabelled(demo: DemoSetup) -> None:
    outcome = await run_night(demo.config, project=demo.project)
    report = _report(outcome)
    assert report["gate_mode"] == "strict" and "final" in _stages(outcome)
    assert "Gate mode" not in (outcome.run_dir / "report.md").read_text()


@pytest.mark.slow
async def test_a_model_change_is_an_advisory_in_report_log_and_status(
    demo: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    first = await run_night(_config(demo, model="mock-a"), project=demo.project)
    assert _report(first)["advisories"] == []
    second = await run_night(_config(demo, model="mock-b"), project=demo.project)
    [advisory] = _report(second)["advisories"]
    assert "mock:mock-a" in advisory and "mock:mock-b" in advisory
    assert "not comparable" in (second.run_dir / "report.md").read_text()
    config = write_config(demo)  # the file's pool: model "mock", not the last night's mock-b
    capsys.readouterr()  # the nights' log lines
    code = main(["status", "--json", "--config", str(config), "--project", str(demo.project)])
    status = json.loads(capsys.readouterr().out)
    assert code == 0 and "mock:mock-b" in status["advisories"][0]
    third = await run_night(_config(demo, model="mock-b"), project=demo.project)
    assert _report(third)["advisories"] == []
