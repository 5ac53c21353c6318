"""The run-directory base both run directories stand on: redacted atomic writes, strict reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt.errors import CorruptStateError
from skillopt.run_files import RunFiles
from skillopt.trainer.persistence import RunDir as TrainerRunDir
from skillopt_sleep.rundir import RunDir as NightRunDir

SECRET = "ghp_abcdefghijklmnopqrstuvwxyz0123"


def test_writes_are_redacted_and_relative_paths_start_at_the_root(tmp_path: Path) -> None:
    files = RunFiles(tmp_path)
    files.write_json("a.json", {"note": f"token {SECRET}"})
    files.write_text(tmp_path / "b.txt", f"token {SECRET}\n")
    for name in ("a.json", "b.txt"):
        text = (tmp_path / name).read_text(encoding="utf-8")
        assert "token" in text and SECRET not in text
    assert files.read_json("a.json")["note"].startswith("token ")


def test_a_file_that_is_not_json_is_named_in_the_error(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{half", encoding="utf-8")
    with pytest.raises(CorruptStateError, match=r"state\.json"):
        RunFiles(tmp_path).read_json("state.json")


def test_both_run_directories_share_it(tmp_path: Path) -> None:
    assert issubclass(TrainerRunDir, RunFiles) and issubclass(NightRunDir, RunFiles)
    trainer = TrainerRunDir(tmp_path / "t")
    trainer.prepare()
    trainer.write_json(trainer.root / "x.json", {"k": SECRET})
    assert SECRET not in json.dumps(trainer.read_json(trainer.root / "x.json"))
