"""The run-directory base both run directories stand on: redacted atomic writes, strict reads."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from skillopt.errors import CorruptStateError
from skillopt.run_files import RunFiles
from skillopt.trainer.persistence import RunDir as TrainerRunDir
from skillopt.trainer.persistence import RunState
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


def test_the_trainer_history_is_what_write_json_writes_and_each_record_is_read_once(
    tmp_path: Path,
) -> None:
    run = TrainerRunDir(tmp_path)
    run.prepare()
    history: list[dict[str, object]] = []
    for step in (1, 2, 3):
        history.append({"step": step, "note": f"key {SECRET}", "rows": [{"s": step / 3}, []]})
        run.save_history(history)
        run.save_step_record(step, history[-1])
        run.write_json("plain.json", history)
        assert run.history_path.read_bytes() == (tmp_path / "plain.json").read_bytes()
        record = run.step_dir(step) / "step_record.json"
        run.write_json("one.json", history[-1])
        assert record.read_bytes() == (tmp_path / "one.json").read_bytes()
    assert SECRET not in run.history_path.read_text(encoding="utf-8")
    text = run.record_json(history[0])
    assert run.record_json(history[0]) is text  # serialized once, however often it is saved
    assert run.record_json(dict(history[0])) == text  # an equal record is its own entry


def test_the_trainer_fsyncs_each_directory_once_before_the_state_that_names_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def recording_fsync(fd: int) -> None:
        target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if target.is_dir():
            events.append(("dir", target.name))
        fsync(fd)

    def recording_replace(src: str, dst: str | Path) -> None:
        events.append(("file", Path(dst).name))
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    run = TrainerRunDir(tmp_path / "t")
    run.prepare()
    for name in ("a.json", "b.json", "c.json"):
        run.write_json(run.step_dir(1) / name, {"n": name})
    run.write_text(run.skill_path(1), "skill")
    assert not [e for e in events if e[0] == "dir"]  # no fsync per file's directory
    state = RunState(
        total_steps=1,
        current_skill_path=run.rel(run.skill_path(1)),
        current_score=0.5,
        best_score=0.5,
        baseline_hash="h",
        baseline_score=0.5,
    )
    run.save_state(state)
    dirs = [name for kind, name in events if kind == "dir"]
    assert sorted(dirs[:2]) == ["skills", "step_0001"] and dirs[2:] == ["t"]  # once each
    assert events.index(("dir", "step_0001")) < events.index(("file", "runtime_state.json"))
    run.sync_dirs()
    assert [name for kind, name in events if kind == "dir"] == dirs  # nothing left to sync
