"""After adoption, each adopted learned line is watched: the sessions since that asked what it
was meant to fix are counted with their corrections, before and after, in `status` and the
report; a correction after adoption flags the line."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from skillopt_sleep.demo import DemoSetup, prepare_demo
from support.sleep_setup import run_cli, write_config
from support.transcripts import Turn, write_claude_session


def _cli(capsys: pytest.CaptureFixture[str], setup: DemoSetup, *argv: str) -> Any:
    cfg = str(setup.root / "sleep.toml")
    code, out = run_cli(capsys, *argv, "--config", cfg, "--project", str(setup.project))
    assert code == 0, out
    return out


def _intent(night: dict[str, Any], task_id: str) -> str:
    """What the night's task ``task_id`` asked, as the user typed it."""
    rows = (Path(night["run_dir"]) / "tasks.jsonl").read_text().splitlines()
    return next(t["intent"] for t in map(json.loads, rows) if t["id"] == task_id)


def _ask_again(setup: DemoSetup, intent: str, follow_up: str, minutes: int) -> None:
    """A session after the adoption asking the same thing, with the user's follow-up."""
    write_claude_session(
        setup.claude_home,
        cwd=setup.project,
        turns=[Turn(user=intent, answer="Done."), Turn(user=follow_up, answer="OK.")],
        start=datetime.now(UTC) + timedelta(minutes=minutes),
    )


@pytest.mark.slow
def test_a_line_corrected_again_after_adoption_is_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = prepare_demo(tmp_path)
    write_config(setup)
    night = _cli(capsys, setup, "once", "--json")
    assert "watched_lines" not in json.loads((Path(night["run_dir"]) / "report.json").read_text())
    assert _cli(capsys, setup, "status", "--json")["watched_lines"] == []
    _cli(capsys, setup, "adopt", "--json")
    watched = _cli(capsys, setup, "status", "--json")["watched_lines"]
    kept = json.loads((Path(night["run_dir"]) / "report.json").read_text())["accepted_edits"]
    assert {w["edit_id"] for w in watched} == {e["id"] for e in kept}
    assert all(w["requests"] and w["after"]["sessions"] == 0 for w in watched)
    assert all(w["before"]["sessions"] >= 1 and not w["contradicted"] for w in watched)

    target = watched[0]
    intent = _intent(night, target["requests"][0])
    _ask_again(setup, intent, "No, that's wrong: do it the other way.", 1)
    second = _cli(capsys, setup, "once", "--json")

    status = _cli(capsys, setup, "status", "--json")
    watched = {w["edit_id"]: w for w in status["watched_lines"]}
    line = watched[target["edit_id"]]
    assert line["after"]["sessions"] == 1 and line["after"]["corrections"] == 1
    index = Path(status["report_index"]).read_text()
    assert "Adopted lines, watched" in index
    assert f'<span class="badge rejected">flagged</span> <code>{target["edit_id"]}</code>' in index
    assert line["contradicted"] and "contradict" in line["flag"]
    assert line["after"]["last_correction"][:10] == datetime.now(UTC).date().isoformat()
    assert not any(w["contradicted"] for k, w in watched.items() if k != target["edit_id"])
    text = _cli(capsys, setup, "status")
    assert f"FLAGGED {target['edit_id']}" in text and "the next night tests removing it" in text
    report = json.loads((Path(second["run_dir"]) / "report.json").read_text())
    assert [w["edit_id"] for w in report["watched_lines"] if w["contradicted"]] == [
        target["edit_id"]
    ]
    markdown = (Path(second["run_dir"]) / "report.md").read_text()
    assert (
        "## Adopted lines, watched" in markdown and f"**flagged** `{target['edit_id']}`" in markdown
    )


@pytest.mark.slow
def test_a_session_that_goes_well_counts_and_a_removed_line_is_no_longer_watched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = prepare_demo(tmp_path)
    write_config(setup)
    night = _cli(capsys, setup, "once", "--json")
    _cli(capsys, setup, "adopt", "--json")
    target = _cli(capsys, setup, "status", "--json")["watched_lines"][0]
    intent = _intent(night, target["requests"][0])
    _ask_again(setup, intent, "Thanks, that's perfect.", 1)
    _cli(capsys, setup, "once", "--json")
    watched = {w["edit_id"]: w for w in _cli(capsys, setup, "status", "--json")["watched_lines"]}
    line = watched[target["edit_id"]]
    assert line["after"] == {"sessions": 1, "corrections": 0, "first_correction": None,
                             "last_correction": None}  # fmt: skip
    assert not line["contradicted"]
    live = setup.config.live_skill_path(setup.project)
    if target["target"] == "memory":
        live = setup.project / "CLAUDE.md"
    live.write_text(live.read_text().replace(target["line"], "a line the user rewrote"))
    after = _cli(capsys, setup, "status", "--json")["watched_lines"]
    assert target["edit_id"] not in {w["edit_id"] for w in after}


@pytest.mark.slow
def test_a_damaged_report_does_not_break_the_watch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A report whose night number is not a number (a hand edit, a damaged disk) costs the
    line its night number, not `status`."""
    setup = prepare_demo(tmp_path)
    write_config(setup)
    night = _cli(capsys, setup, "once", "--json")
    _cli(capsys, setup, "adopt", "--json")
    path = Path(night["run_dir"]) / "report.json"
    report = json.loads(path.read_text())
    path.write_text(json.dumps({**report, "night": "the third"}))
    watched = _cli(capsys, setup, "status", "--json")["watched_lines"]
    assert watched and all(w["night"] == 0 for w in watched)
