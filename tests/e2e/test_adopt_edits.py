"""`adopt --edit ID`: some of a night's kept edits, checked against the live documents first
(the night's final check, its cost said before and after), adopted only if they pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.learn.crossfit import ADOPT
from support.sleep_setup import run_cli as cli
from support.sleep_setup import write_config


@pytest.fixture
def setup(tmp_path: Path) -> DemoSetup:
    return prepare_demo(tmp_path)


def _night(setup: DemoSetup, capsys: pytest.CaptureFixture[str]) -> tuple[str, dict[str, Any]]:
    cfg = str(write_config(setup))
    code, night = cli(capsys, "once", "--config", cfg, "--project", str(setup.project), "--json")
    assert code == 0 and night["accepted"]
    return cfg, night


def _files(setup: DemoSetup) -> dict[Path, bytes]:
    paths = (setup.config.live_skill_path(setup.project), setup.project / "CLAUDE.md")
    return {p: p.read_bytes() for p in paths}


@pytest.mark.slow
def test_a_subset_is_checked_then_adopted_and_settles_the_night(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, night = _night(setup, capsys)
    proj = str(setup.project)
    code, status = cli(capsys, "status", "--config", cfg, "--project", proj, "--json")
    edits = status["pending_edits"]
    skill_edits = [e for e in edits if e["target"] == "skill"]
    assert len(edits) >= 2 and len(skill_edits) >= 1
    report_md = (Path(night["run_dir"]) / "report.md").read_text()
    assert all(f"`{e['id']}`" in report_md for e in edits) and "--edit ID" in report_md
    page = (Path(night["run_dir"]) / "report.html").read_text()
    assert all(f"<code>{e['id']}</code>" in page for e in edits)
    chosen = skill_edits[0]
    before = _files(setup)
    code, text = cli(capsys, "adopt", "--config", cfg, "--project", proj, "--edit", chosen["id"])
    assert code == 0, text
    said = text.splitlines()
    assert said[0].startswith(f"checking 1 of the night's {len(edits)} kept edit(s)")
    assert "model call(s)" in said[0] and "the check made" in said[1]
    skill = setup.config.live_skill_path(setup.project)
    assert chosen["content"] in skill.read_text()
    for other in edits:
        if other is not chosen:
            assert (
                other["content"]
                not in skill.read_text() + (setup.project / "CLAUDE.md").read_text()
            )
    assert (setup.project / "CLAUDE.md").read_bytes() == before[setup.project / "CLAUDE.md"]
    # the night's own proposal is settled: nothing pending, nothing left to adopt
    code, status = cli(capsys, "status", "--config", cfg, "--project", proj, "--json")
    assert status["pending_proposals"] == [] and status["pending_edits"] == []
    code, again = cli(capsys, "adopt", "--config", cfg, "--project", proj, "--json")
    assert code == 0 and again["nothing_to_adopt"]
    assert skill.read_text().count(chosen["content"]) == 1


@pytest.mark.slow
def test_the_check_reports_its_calls_within_the_estimate(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, night = _night(setup, capsys)
    proj = str(setup.project)
    code, status = cli(capsys, "status", "--config", cfg, "--project", proj, "--json")
    ids = [e["id"] for e in status["pending_edits"] if e["target"] == "skill"][:1]
    code, out = cli(capsys, "adopt", "--config", cfg, "--project", proj, "--json",
                    *[a for i in ids for a in ("--edit", i)])  # fmt: skip
    assert code == 0 and out["ok"] and out["edits"] == ids
    check, estimate = out["check"], out["estimate"]
    assert check["passed"] and check["action"] == "accept_new_best"
    assert estimate["calls_at_least"] <= check["calls"] <= estimate["calls_at_most"]
    folder = Path(check["folder"])
    assert folder.parent.parent == Path(night["run_dir"])
    journal = json.loads((folder / "run.json").read_text())
    assert [s["name"] for s in journal["stages"]] == ["final"]
    assert journal["stages"][0]["model_calls"] == check["calls"] > 0
    # both arms drawn anew, on sample ids no decision of the night read (issue 29: a check
    # that read back the night's samples would re-read what chose the edits)
    rows = [json.loads(line) for line in (folder / "rollouts.jsonl").read_text().splitlines()]
    assert len({r["skill_hash"] + r["memory_hash"] for r in rows}) == 2
    assert all(ADOPT <= r["sample_id"] < ADOPT + 1000 for r in rows)


@pytest.mark.slow
def test_a_subset_that_fails_its_check_changes_nothing_and_says_why(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, _ = _night(setup, capsys)
    proj = str(setup.project)
    code, status = cli(capsys, "status", "--config", cfg, "--project", proj, "--json")
    first = status["pending_edits"][0]["id"]
    strict = str(write_config(setup, extra="[gate]\nmin_delta = 0.9\n"))
    before = _files(setup)
    code, out = cli(capsys, "adopt", "--config", strict, "--project", proj, "--edit", first,
                    "--json")  # fmt: skip
    assert code == 2 and not out["ok"] and out["error"] == "subset_rejected"
    assert "did not pass the gate" in out["message"] and "nothing was changed" in out["message"]
    assert out["check"]["calls"] > 0 and out["adopted"] == []
    assert _files(setup) == before
    code, status = cli(capsys, "status", "--config", cfg, "--project", proj, "--json")
    assert status["pending_edits"]  # the night's proposal still waits, whole


def test_unknown_ids_and_a_changed_live_file_are_refused_before_any_call(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, night = _night(setup, capsys)
    proj = str(setup.project)
    code, out = cli(capsys, "adopt", "--config", cfg, "--project", proj, "--edit", "ffffff",
                    "--json")  # fmt: skip
    assert code == 2 and "no edit with id ffffff" in out["message"]
    assert not (Path(night["run_dir"]) / "subsets").exists()
    code, out = cli(capsys, "adopt", "--config", cfg, "--project", proj, "--edit", "x",
                    "--all", "--json")  # fmt: skip
    assert code == 2 and out["error"] == "invalid_selection"
    code, status = cli(capsys, "status", "--config", cfg, "--project", proj, "--json")
    code, text = cli(capsys, "status", "--config", cfg, "--project", proj)
    assert "--edit ID" in text and all(e["id"] in text for e in status["pending_edits"])
    skill = setup.config.live_skill_path(setup.project)
    skill.write_text(skill.read_text() + "- a line the user added by hand\n")
    code, out = cli(capsys, "adopt", "--config", cfg, "--project", proj, "--edit",
                    status["pending_edits"][0]["id"], "--json")  # fmt: skip
    assert code == 2 and "changed since night 1" in out["message"]
    assert not (Path(night["run_dir"]) / "subsets").exists()
