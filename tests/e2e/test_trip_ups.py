"""Small things users tripped over (issue 11, item 20).

Before: ``status`` showed a "next scheduled night" when nothing scheduled nights; a night
stopped by its budget said "No edit was proposed (no reason recorded)" and scored "— to —";
``once --demo --state-dir DIR`` ignored ``DIR``, so demo nights could not follow each other.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from skillopt_sleep.cli import main
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.daemon.health import project_health
from skillopt_sleep.daemon.settings import DaemonSettings
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.lock import project_key
from skillopt_sleep.night.entry import NightResult, run_night
from skillopt_sleep.schedule import ROOT_ENV
from support.sleep_setup import write_config

NO_CRONTAB = ""


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out) if "--json" in argv else out


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DemoSetup:
    monkeypatch.setenv(ROOT_ENV, str(tmp_path / "units"))  # never the user's own units
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # and never their crontab
    return prepare_demo(tmp_path / "demo")


# --------------------------------------------------------------------------- status


def test_status_says_nothing_schedules_nights_when_nothing_does(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, proj = str(write_config(setup)), str(setup.project)
    code, data = cli(capsys, "status", "--config", cfg, "--project", proj, "--json")
    assert code == 0 and data["next_wake"] is None and data["scheduled_by"] == []
    code, text = cli(capsys, "status", "--config", cfg, "--project", proj)
    assert "nothing schedules nights" in text and "next scheduled night" not in text


def test_status_shows_the_next_night_of_an_enabled_timer(
    setup: DemoSetup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, proj = str(write_config(setup)), str(setup.project)
    code, _ = cli(capsys, "schedule", "install", "--systemd", "--config", cfg, "--project", proj)
    assert code == 0
    units = tmp_path / "units"
    timer = units / f"skillopt-sleep-{project_key(setup.project)}.timer"
    assert timer.is_file()
    code, data = cli(capsys, "status", "--config", cfg, "--project", proj, "--json")
    assert data["next_wake"] is None  # written but not enabled: it starts nothing
    (units / "timers.target.wants").mkdir()
    os.symlink(timer, units / "timers.target.wants" / timer.name)  # what `enable` does
    code, data = cli(capsys, "status", "--config", cfg, "--project", proj, "--json")
    assert data["scheduled_by"] == [f"systemd ({timer})"]
    assert data["next_wake"] and "T02:30:00" in data["next_wake"]
    code, text = cli(capsys, "status", "--config", cfg, "--project", proj)
    assert "next scheduled night:" in text and "(by systemd" in text


def test_a_crontab_line_and_a_launchd_agent_count_as_schedulers(
    setup: DemoSetup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = project_key(setup.project)
    line = f"15 4 * * * skillopt-sleep once >> log 2>&1 # skillopt-sleep:{key}"
    health = project_health(
        DaemonSettings(), setup.state_dir, setup.project, crontab=lambda: f"# mine\n{line}\n"
    )
    assert health["scheduled_by"] == ["cron (crontab)"]
    assert "T04:15:00" in health["next_wake"]
    assert (
        project_health(
            DaemonSettings(), setup.state_dir, setup.project, crontab=lambda: NO_CRONTAB
        )["next_wake"]
        is None
    )
    cfg, proj = str(write_config(setup)), str(setup.project)
    code, _ = cli(capsys, "schedule", "install", "--launchd", "--config", cfg, "--project", proj)
    assert code == 0
    health = project_health(
        DaemonSettings(), setup.state_dir, setup.project, crontab=lambda: NO_CRONTAB
    )
    assert [s.split(" ")[0] for s in health["scheduled_by"]] == ["launchd"]
    assert "T02:30:00" in health["next_wake"]


# --------------------------------------------------------------------------- report


# 30 stops the baseline; 120 is a cap the estimate says is tight: the night tries what it
# can afford, then stops with the untried edits carried (with a kept step, the night holds
# the final check's budget back and stages what it kept: sleep/night/test_run.py,
# test_run_budget.py).
@pytest.mark.parametrize("max_calls", [30, 120])
async def test_a_budget_stopped_night_reads_as_one(setup: DemoSetup, max_calls: int) -> None:
    data = setup.config.model_dump(mode="json")
    data["budget"]["max_calls"] = max_calls
    outcome = await run_night(SleepConfig.model_validate(data), project=setup.project)
    assert outcome.result is NightResult.BUDGET_REACHED and outcome.run_dir is not None
    summary = (outcome.run_dir / "report.md").read_text().split("## Learning curve")[0]
    assert "****" not in summary and "no reason recorded" not in summary
    assert "— to —" not in summary.replace("**", "")
    if max_calls == 30:
        assert "spend cap was reached, before any decision" in summary
        assert f"calls {max_calls} of {max_calls}" in summary
    else:
        assert "could not cover what was left" in summary and f"of {max_calls}" in summary
    assert "`budget.max_calls`" in summary


# --------------------------------------------------------------------------- demo


@pytest.mark.slow
def test_demo_nights_follow_each_other_in_a_state_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "demo-state"
    code, first = cli(capsys, "once", "--demo", "--state-dir", str(state), "--json")
    assert code == 0 and first["result"] == "accepted"
    assert Path(first["run_dir"]).is_relative_to(state)
    code, second = cli(capsys, "once", "--demo", "--state-dir", str(state), "--json")
    assert code == 0 and Path(second["run_dir"]).parent == Path(first["run_dir"]).parent
    report = json.loads((Path(second["run_dir"]) / "report.json").read_text())
    assert report["night"] == 2 and [p["night"] for p in report["chart"]] == [1, 2]
    config = state / "demo" / "sleep.toml"
    code, status = cli(capsys, "status", "--config", str(config), "--project",
                       str(state / "demo" / "demo-project"), "--json")  # fmt: skip
    assert code == 0 and status["nights_run"] == 2
    code, text = cli(capsys, "once", "--demo", "--state-dir", str(state))
    assert code == 0 and f"everything lives under {state.resolve()}" in text
