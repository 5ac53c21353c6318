"""`skillopt-sleep versions`: list, show, diff and restore what nights stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skillopt_sleep.cli import main
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.staging import SkillStore
from skillopt_sleep.state import project_dir
from support.sleep_setup import write_config


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out) if "--json" in argv else out


@pytest.fixture
def setup(tmp_path: Path) -> DemoSetup:
    return prepare_demo(tmp_path)


@pytest.mark.slow
def test_list_show_diff_restore(setup: DemoSetup, capsys: pytest.CaptureFixture[str]) -> None:
    cfg, proj = str(write_config(setup)), str(setup.project)
    common = ("--config", cfg, "--project", proj)
    code, night = cli(capsys, "once", *common, "--json")
    assert code == 0 and night["accepted"]
    code, _ = cli(capsys, "adopt", *common, "--json")
    assert code == 0
    live = setup.config.live_skill_path(setup.project)
    name = live.parent.name
    code, listed = cli(capsys, "versions", *common, "--json")
    assert code == 0
    [first] = listed["versions"]
    assert first["skill"] == name and first["version"] == 1 and first["night"] == 1
    assert first["adopted"] and first["live"] and first["parent"] is None
    assert first["score"] == night["candidate"]
    code, shown = cli(capsys, "versions", "show", "1", *common, "--json")
    assert code == 0 and shown["text"].encode() == live.read_bytes()

    # a later night's version (stored the way staging stores it), then back and forth
    store = SkillStore(project_dir(setup.state_dir, setup.project))
    later = live.read_text() + "\n- A rule a later night learned.\n"
    store.add_version(name, later, run_id="later", night=2)
    code, diff = cli(capsys, "versions", "diff", f"{name}@1", "v2", "--skill", name, *common)
    assert code == 0 and "+- A rule a later night learned." in diff
    code, restored = cli(capsys, "versions", "restore", "2", *common, "--json")
    assert code == 0 and live.read_text() == later
    [receipt] = restored["adopted"]
    assert Path(receipt["backup_path"]).read_text() == shown["text"]
    code, listed = cli(capsys, "versions", *common, "--json")
    status = {v["version"]: (v["adopted"], v["live"]) for v in listed["versions"]}
    assert status == {1: (True, False), 2: (True, True)}
    code, _ = cli(capsys, "versions", "restore", "1", *common, "--json")
    assert code == 0 and live.read_text() == shown["text"]
    code, again = cli(capsys, "versions", "restore", "1", *common, "--json")
    assert code == 2 and "already holds" in again["message"]
    code, text = cli(capsys, "versions", *common)
    assert code == 0 and name in text and "adopted, live" in text


def test_bad_references_are_refused(setup: DemoSetup, capsys: pytest.CaptureFixture[str]) -> None:
    common = ("--config", str(write_config(setup)), "--project", str(setup.project), "--json")
    code, out = cli(capsys, "versions", "show", *common)
    assert code == 2 and out["error"] == "invalid_arguments"
    code, out = cli(capsys, "versions", "show", "x@y", *common)
    assert code == 2 and "not a version" in out["message"]
    code, out = cli(capsys, "versions", "show", "3", *common)
    assert code == 2 and "no skills yet" in out["message"]
    code, out = cli(capsys, "versions", *common)
    assert code == 0 and out["versions"] == []
