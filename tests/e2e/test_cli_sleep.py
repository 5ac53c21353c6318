"""The `skillopt-sleep` night commands in-process: once, dry-run, status, adopt, harvest."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from skillopt_sleep.cli import main
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.lock import project_lock
from support.adoption import killed_adoption
from support.sleep_setup import write_config


@pytest.fixture
def setup(tmp_path: Path) -> DemoSetup:
    return prepare_demo(tmp_path)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out) if "--json" in argv else out


@pytest.mark.slow
def test_once_demo(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = cli(capsys, "once", "--demo", "--json")
    assert code == 0 and data["ok"] and data["result"] == "accepted"
    assert Path(data["report"]).is_file()
    code, out = cli(capsys, "once", "--demo", "--rounds", "1", "--dream-rollouts", "1")
    assert code == 0 and "Read the report:" in out and "report.md" in out


@pytest.mark.slow
def test_night_status_adopt_round_trip(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(write_config(setup))
    proj = str(setup.project)
    live = setup.config.live_skill_path(setup.project)
    before = live.read_bytes()
    code, night = cli(capsys, "once", "--config", cfg, "--project", proj, "--json")
    assert code == 0 and night["accepted"]
    assert live.read_bytes() == before
    code, status = cli(capsys, "status", "--config", cfg, "--project", proj, "--json")
    assert code == 0 and status["nights_run"] == 1 and status["recent"][0]["status"] == "complete"
    assert {p["kind"] for p in status["pending_proposals"]} >= {"skill"}
    code, adopted = cli(capsys, "adopt", "--config", cfg, "--project", proj, "--json")
    assert code == 0 and adopted["ok"]
    assert live.read_bytes() != before
    manifest = json.loads((Path(night["run_dir"]) / "proposal" / "manifest.json").read_text())
    skill_entry = next(e for e in manifest["entries"] if e["kind"] == "skill")
    assert live.read_bytes() == (Path(night["run_dir"]) / skill_entry["proposed_file"]).read_bytes()
    code, status = cli(capsys, "status", "--config", cfg, "--project", proj, "--json")
    assert status["pending_proposals"] == []
    # nothing left to adopt is not an error: `once && adopt` works in a crontab
    code, again = cli(capsys, "adopt", "--config", cfg, "--project", proj, "--json")
    assert code == 0 and again["ok"] and again["nothing_to_adopt"] and again["adopted"] == []
    code, text = cli(capsys, "adopt", "--config", cfg, "--project", proj)
    assert code == 0 and "nothing to adopt" in text


@pytest.mark.slow
def test_adopt_refuses_when_the_live_file_changed(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(write_config(setup))
    proj = str(setup.project)
    code, night = cli(capsys, "once", "--config", cfg, "--project", proj, "--json")
    assert code == 0 and night["accepted"]
    live = setup.config.live_skill_path(setup.project)
    live.write_text(live.read_text() + "- a line the user added by hand\n")
    edited = live.read_bytes()
    code, out = cli(capsys, "adopt", "--config", cfg, "--project", proj, "--json")
    assert code == 2 and not out["ok"] and "changed" in out["message"]
    assert live.read_bytes() == edited


@pytest.mark.slow
def test_adopt_refuses_a_live_path_outside_the_skill_roots(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    elsewhere = tmp_path / "other-skills"
    elsewhere.mkdir()
    proj = str(setup.project)
    ok_cfg = str(write_config(setup))
    code, night = cli(capsys, "once", "--config", ok_cfg, "--project", proj, "--json")
    assert code == 0 and night["accepted"]
    bad_cfg = str(write_config(setup, extra=f'skill_roots = ["{elsewhere}"]'))
    live = setup.config.live_skill_path(setup.project)
    before = live.read_bytes()
    code, out = cli(capsys, "adopt", "--config", bad_cfg, "--project", proj, "--only",
                    live.parent.name, "--json")  # fmt: skip
    assert code == 2 and not out["ok"]
    assert live.read_bytes() == before


@pytest.mark.slow
def test_adopt_writes_only_under_the_configured_roots(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    proj = str(setup.project)
    skills = setup.claude_home / "skills"
    code, night = cli(capsys, "once", "--config", str(write_config(setup)), "--project", proj,
                      "--json")  # fmt: skip
    assert code == 0 and night["accepted"]
    only_skills = str(write_config(setup, extra=f'skill_roots = ["{skills}"]'))
    live = {
        p: p.read_bytes()
        for p in (setup.config.live_skill_path(setup.project), setup.project / "CLAUDE.md")
    }
    code, out = cli(capsys, "adopt", "--config", only_skills, "--project", proj, "--json")
    assert code == 2 and not out["ok"]
    assert "CLAUDE.md" in out["message"] and "`skill_roots`" in out["message"]
    assert {p: p.read_bytes() for p in live} == live  # all or nothing: the skill neither
    with_project = str(write_config(setup, extra=f'skill_roots = ["{skills}", "."]'))
    code, out = cli(capsys, "adopt", "--config", with_project, "--project", proj, "--json")
    assert code == 0 and {a["kind"] for a in out["adopted"]} == {"skill", "memory"}


def test_a_held_lock_refuses_with_exit_2(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(write_config(setup))
    with project_lock(setup.state_dir, setup.project, command="test"):
        code, out = cli(capsys, "once", "--config", cfg, "--project", str(setup.project), "--json")
    assert code == 2 and out["error"] == "lock_held"


def test_no_pool_configured_is_a_usage_error(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(write_config(setup, pool=""))
    code, out = cli(capsys, "once", "--config", cfg, "--project", str(setup.project), "--json")
    assert code == 2 and "pool" in out["message"]
    assert not list(setup.state_dir.glob("projects/*/runs/*")), "a refused night leaves no run"


def test_harvest_draft_and_the_review_gate(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = setup.root / "tasks.json"
    mock_cfg = str(write_config(setup))
    proj = str(setup.project)
    code, out = cli(capsys, "harvest", "--config", mock_cfg, "--project", proj,
                    "--output", str(tasks), "--json")  # fmt: skip
    assert code == 0 and out["n_sessions"] == 16 and len(out["tasks"]) == 16
    assert json.loads(tasks.read_text())["reviewed"] is False
    real_pool = """
[[pool.members]]
kind = "openai"
name = "real"
base_url = "http://127.0.0.1:9/v1"
model = "m"

[pool.roles]
target = ["real"]
optimizer = ["real"]
"""
    real_cfg = str(write_config(setup, pool=real_pool))
    code, out = cli(capsys, "once", "--config", real_cfg, "--project", proj,
                    "--tasks-file", str(tasks), "--json")  # fmt: skip
    assert code == 2 and "reviewed" in out["message"]
    assert not list(setup.state_dir.glob("projects/*/runs/*"))  # refused before anything ran
    mock_cfg = str(write_config(setup))
    code, out = cli(capsys, "once", "--config", mock_cfg, "--project", proj,
                    "--tasks-file", str(tasks), "--json")  # fmt: skip
    assert code == 0 and out["n_tasks"] == 16


@pytest.mark.slow
def test_dry_run_command(setup: DemoSetup, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(write_config(setup))
    code, out = cli(capsys, "dry-run", "--config", cfg, "--project", str(setup.project), "--json")
    assert code == 0 and out["dry_run"] and out["proposal"] is None


def test_status_shows_who_holds_the_project_lock(
    capsys: pytest.CaptureFixture[str], setup: DemoSetup
) -> None:
    cfg, proj = str(write_config(setup)), str(setup.project)
    code, idle = cli(capsys, "status", "--config", cfg, "--project", proj, "--json")
    assert code == 0 and idle["night_in_progress"] is None and idle["daemon_running"] is False
    assert idle["next_wake"] is None and idle["scheduled_by"] == []  # nothing schedules
    with project_lock(setup.state_dir, setup.project, command="once"):
        code, busy = cli(capsys, "status", "--config", cfg, "--project", proj, "--json")
        code_text, text = cli(capsys, "status", "--config", cfg, "--project", proj)
    assert code == 0 and busy["night_in_progress"]["command"] == "once"
    assert code_text == 0 and "night in progress: once" in text


def _half_adopted(setup: DemoSetup, capsys: pytest.CaptureFixture[str], **kill: Any) -> Path:
    """A night, then an adoption killed part-way through its two files; the run dir."""
    cfg, proj = str(write_config(setup)), str(setup.project)
    code, night = cli(capsys, "once", "--config", cfg, "--project", proj, "--json")
    assert code == 0 and night["accepted"]
    skill = setup.config.live_skill_path(setup.project)
    killed_adoption(Path(night["run_dir"]), [skill.parent.parent, setup.project], **kill)
    return Path(night["run_dir"])


def _leftovers(setup: DemoSetup, run: Path) -> list[Path]:
    skill_dir = setup.config.live_skill_path(setup.project).parent
    temps = [*skill_dir.glob(".tmp-*"), *setup.project.glob(".tmp-*")]
    return [*temps, *run.glob(".adopt-journal.json")]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["status", "once", "adopt"])
def test_the_next_command_rolls_back_an_interrupted_adoption_and_says_so(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    skill, memory = setup.config.live_skill_path(setup.project), setup.project / "CLAUDE.md"
    before = {p: p.read_bytes() for p in (skill, memory)}
    run = _half_adopted(setup, capsys, die_at=2)
    assert skill.read_bytes() != before[skill] and memory.read_bytes() == before[memory]
    assert _leftovers(setup, run)
    cfg, proj = str(write_config(setup)), str(setup.project)
    code, out = cli(capsys, command, "--config", cfg, "--project", proj, "--json")
    assert code == 0, out
    (recovery,) = out["recovered_adoptions"]
    assert recovery["action"] == "rolled_back" and recovery["files"] == [str(skill)]
    assert "rolled back" in recovery["message"]
    assert _leftovers(setup, run) == []
    if command == "adopt":  # then adopted again, whole
        assert skill.read_bytes() != before[skill] and memory.read_bytes() != before[memory]
    else:
        assert skill.read_bytes() == before[skill] and memory.read_bytes() == before[memory]


@pytest.mark.slow
def test_status_completes_an_adoption_killed_after_its_last_file(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _half_adopted(setup, capsys, die_at=2, replaced=True)
    cfg, proj = str(write_config(setup)), str(setup.project)
    code, text = cli(capsys, "status", "--config", cfg, "--project", proj)
    assert code == 0 and f"interrupted adoption of night {run.name} was completed" in text
    assert "no pending proposals" in text
    assert _leftovers(setup, run) == []
    code, text = cli(capsys, "status", "--config", cfg, "--project", proj)
    assert "interrupted" not in text  # said once, when it was done


@pytest.mark.slow
def test_a_document_adoption_could_not_write_stops_the_night_before_it_spends(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    """The memory file is outside skill_roots: adopt would refuse it after the night was
    paid for, so the night refuses at start."""
    proj = str(setup.project)
    skills = setup.claude_home / "skills"
    only_skills = str(write_config(setup, extra=f'skill_roots = ["{skills}"]'))
    code, out = cli(capsys, "once", "--config", only_skills, "--project", proj, "--json")
    assert code == 2 and "memory_path" in out["message"] and "skill_roots" in out["message"]
    assert not list(setup.state_dir.glob("projects/*/runs/*")), "nothing ran, nothing spent"
    no_memory = str(
        write_config(setup, extra=f'skill_roots = ["{skills}"]').read_text()
        .replace("[night]\n", "[night]\nevolve_memory = false\n")
    )  # fmt: skip
    path = setup.root / "no-memory.toml"
    path.write_text(no_memory)
    code, night = cli(capsys, "once", "--config", str(path), "--project", proj, "--json")
    assert code == 0 and night["accepted"]  # the memory is not evolved: nothing to refuse


def test_a_project_that_does_not_exist_is_refused(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(write_config(setup))
    gone = str(setup.root / "no-such-project")
    for command in ("once", "status", "harvest"):
        code, out = cli(capsys, command, "--config", cfg, "--project", gone, "--json")
        assert code == 2 and out["message"] == f"--project: {gone} is not a directory", command
    assert main(["daemon", "--config", cfg, "--project", gone]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_a_bad_flag_value_is_blamed_on_the_flag(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(write_config(setup))
    code, out = cli(capsys, "once", "--config", cfg, "--project", str(setup.project),
                    "--rounds", "0", "--json")  # fmt: skip
    assert code == 2 and out["message"].startswith("the --rounds flag: night.rounds: ")
    assert cfg not in out["message"]


@pytest.mark.parametrize("command", ["status", "once", "daemon", "schedule"])
def test_an_unknown_log_level_is_a_usage_error(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [command, "--log-level", "bogus"] + (["show"] if command == "schedule" else [])
    assert main(argv) == 2
    assert "unknown log level 'bogus'" in capsys.readouterr().err
    assert main([command, "--log-level", "debug", "--help"]) == 0  # any case is fine


def test_the_trainer_cli_checks_its_log_level_too(capsys: pytest.CaptureFixture[str]) -> None:
    from skillopt.cli import main as skillopt_main

    with pytest.raises(SystemExit) as stopped:
        skillopt_main(["train", "--config", "x.toml", "--log-level", "loud"])
    assert stopped.value.code == 2 and "unknown log level 'loud'" in capsys.readouterr().err


def _hinted(out: str, before: str) -> list[str]:
    """The command in backquotes after ``before`` in a command's output."""
    found = re.search(re.escape(before) + r"[^`]*`([^`]+)`", out)
    assert found is not None, out
    return shlex.split(found.group(1))


@pytest.mark.slow
def test_printed_hints_carry_the_flags_that_find_the_night(
    setup: DemoSetup,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A night run with --config/--state-dir/--project from elsewhere: the adopt command it
    prints (and status prints) finds its proposal as printed."""
    monkeypatch.chdir(tmp_path)
    cfg = str(write_config(setup))
    state = str(tmp_path / "other-state")
    flags = ["--config", cfg, "--project", str(setup.project), "--state-dir", state]
    code, out = cli(capsys, "status", *flags)
    assert _hinted(out, "no nights yet: run")[1:] == ["once", *_flag_order(flags)]
    code, out = cli(capsys, "once", *flags)
    assert code == 0 and "proposal staged" in out
    adopt = _hinted(out, "adopt with")
    assert adopt[1] == "adopt" and set(_flag_order(flags)) <= set(adopt)
    code, out = cli(capsys, "status", *flags)
    assert _hinted(out, "pending proposals (adopt with") == adopt
    assert main(adopt[1:]) == 0
    assert "adopted" in capsys.readouterr().out


def _flag_order(flags: list[str]) -> list[str]:
    """``flags`` in the order the hints write them (--config, --state-dir, --project)."""
    pairs = dict(zip(flags[::2], flags[1::2], strict=True))
    return [x for f in ("--config", "--state-dir", "--project") for x in (f, pairs[f])]


def test_the_harvest_hint_runs_the_reviewed_night(
    setup: DemoSetup,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = str(write_config(setup))
    draft = setup.root / "tasks.json"
    code, out = cli(capsys, "harvest", "--config", cfg, "--project", str(setup.project),
                    "--output", str(draft))  # fmt: skip
    assert code == 0
    once = _hinted(out, "then run")
    assert once[1:] == ["once", "--config", cfg, "--project", str(setup.project),
                        "--tasks-file", str(draft)]  # fmt: skip
    assert main(once[1:]) == 0


def test_demo_says_which_settings_it_does_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from structlog.testing import capture_logs

    from skillopt_sleep.commands._common import load_config

    monkeypatch.setenv("SKILLOPT_SLEEP__NIGHT__ROUNDS", "3")
    args = argparse.Namespace(demo=True, config=tmp_path / "mine.toml", project=None,
                              state_dir=None, rounds=2)  # fmt: skip
    with capture_logs() as logs:
        cfg, _ = load_config(args)
    [event] = [e for e in logs if e["event"] == "demo.ignored"]
    assert event["ignored"] == ["--config", "SKILLOPT_SLEEP__NIGHT__ROUNDS"]
    assert cfg.night.rounds == 2  # the night flags still apply
