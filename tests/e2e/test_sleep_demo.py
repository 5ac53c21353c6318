"""`once --demo` leaves a config behind so a newcomer can try `status` and `adopt` on it."""

from __future__ import annotations

import hashlib
import shlex
import shutil
import tempfile
from pathlib import Path

import pytest

from skillopt_sleep.cli import main
from skillopt_sleep.config import load_sleep_config
from skillopt_sleep.demo import prepare_demo


def test_demo_config_file_loads_to_the_demo_settings(tmp_path: Path) -> None:
    setup = prepare_demo(tmp_path)
    loaded = load_sleep_config(tmp_path / "sleep.toml", environ={})
    assert loaded.model_dump(mode="json") == setup.config.model_dump(mode="json")


def test_demo_prints_status_and_adopt_commands_that_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # like `make demo`: the venv is not activated
    assert main(["once", "--demo"]) == 0
    out = capsys.readouterr().out
    lines = [shlex.split(x) for x in out.splitlines() if x.startswith("  ") and "--config" in x]
    # the printed program can be run as printed (make demo does not activate the venv)
    assert lines and all(shutil.which(words[0]) for words in lines)
    commands = [words[1:] for words in lines]
    report = Path(next(x for x in out.splitlines() if x.startswith("Read the report:")).split()[-1])
    text = report.read_text()
    # jargon in the report is explained where it appears
    assert "metric mixed: a blend" in text and "Decisions: `accept_new_best` =" in text
    status = next(c for c in commands if c[0] == "status")
    adopt = next(c for c in commands if c[0] == "adopt")

    assert main(status) == 0
    shown = capsys.readouterr().out
    assert "accepted" in shown and "pending proposals" in shown

    (root,) = tmp_path.glob("skillopt-sleep-demo-*")
    skill = next(root.glob("claude-home/skills/*/SKILL.md"))
    before = hashlib.sha256(skill.read_bytes()).hexdigest()
    assert main(adopt) == 0
    assert "adopted" in capsys.readouterr().out
    assert hashlib.sha256(skill.read_bytes()).hexdigest() != before
