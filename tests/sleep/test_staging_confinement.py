"""The skill store and the proposals trust no path read from the state directory (issue 24,
item 7): an index or a manifest edited on disk cannot make ``versions show`` / ``restore`` /
``adopt`` read or write anything but their own files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skillopt_sleep.cli import main
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.staging import SkillStore, sha256_bytes
from skillopt_sleep.state import project_dir, runs_dir
from support.sleep_setup import write_config


@pytest.fixture
def setup(tmp_path: Path) -> DemoSetup:
    return prepare_demo(tmp_path)


def _cli(capsys: pytest.CaptureFixture[str], setup: DemoSetup, *argv: str) -> tuple[int, Any]:
    common = ("--config", str(write_config(setup)), "--project", str(setup.project), "--json")
    code = main([*argv, *common])
    return code, json.loads(capsys.readouterr().out)


def _index(setup: DemoSetup, name: str, file: str, data: bytes) -> None:
    folder = SkillStore(project_dir(setup.state_dir, setup.project)).root / name
    (folder / "versions").mkdir(parents=True, exist_ok=True)
    version = {
        "name": name,
        "number": 1,
        "file": file,
        "sha256": sha256_bytes(data),
        "run_id": "r",
        "night": 1,
        "parent": None,
        "created_at": "2026-01-01T00:00:00+00:00",
    }
    (folder / "index.json").write_text(
        json.dumps({"version": 1, "name": name, "versions": [version]})
    )


@pytest.mark.parametrize("where", ["absolute", "climbing"])
def test_an_index_naming_a_file_outside_the_store_is_refused(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    outside = setup.root / "outside.txt"
    outside.write_text("not a skill\n")
    live = setup.config.live_skill_path(setup.project)
    before = live.read_bytes()
    name = live.parent.name
    file = str(outside) if where == "absolute" else "../" * 6 + "outside.txt"
    _index(setup, name, file, outside.read_bytes())
    code, shown = _cli(capsys, setup, "versions", "show", f"{name}@1")
    assert code == 2 and "index" in shown["message"] and "not a skill" not in json.dumps(shown)
    code, _ = _cli(capsys, setup, "versions", "restore", f"{name}@1")
    assert code == 2 and live.read_bytes() == before


def test_a_symlinked_version_file_is_refused(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = setup.root / "outside.txt"
    outside.write_text("not a skill\n")
    name = setup.config.live_skill_path(setup.project).parent.name
    _index(setup, name, "v0001.md", outside.read_bytes())
    versions = SkillStore(project_dir(setup.state_dir, setup.project)).root / name / "versions"
    (versions / "v0001.md").symlink_to(outside)
    code, shown = _cli(capsys, setup, "versions", "show", f"{name}@1")
    assert code == 2 and "symlink" in shown["message"]


def _run_with_manifest(setup: DemoSetup, entry: dict[str, Any]) -> Path:
    run = runs_dir(setup.state_dir, setup.project) / "20260101T000000Z-1"
    (run / "proposal").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    manifest = {
        "schema": "skillopt.proposal",
        "version": 1,
        "run_id": run.name,
        "created_at": "2026-01-01T00:00:00+00:00",
        "entries": [entry],
    }
    (run / "proposal" / "manifest.json").write_text(json.dumps(manifest))
    return run


def _entry(name: str, live: Path, *, proposed: str = "") -> dict[str, Any]:
    return {
        "name": name,
        "kind": "skill",
        "proposed_file": proposed or f"proposal/skill-{name}.md",
        "sha256": "0" * 64,
        "live_path": str(live),
        "live_realpath": str(live.resolve()),
        "live_sha256": sha256_bytes(live.read_bytes()),
    }


@pytest.mark.parametrize("name", ["tidy", "managed"])
def test_a_manifest_pointing_a_skill_at_the_memory_file_never_restores_into_it(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    memory = setup.project / "CLAUDE.md"
    before = memory.read_bytes()
    if name == "managed":
        name = setup.config.live_skill_path(setup.project).parent.name
    store = SkillStore(project_dir(setup.state_dir, setup.project))
    store.add_version(name, "# skill text\n\n- a rule\n", run_id="r", night=1)
    _run_with_manifest(setup, _entry(name, memory))
    _cli(capsys, setup, "versions", "restore", f"{name}@1")
    assert memory.read_bytes() == before


def test_a_manifest_whose_proposed_file_leaves_the_run_is_refused(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    live = setup.config.live_skill_path(setup.project)
    before = live.read_bytes()
    outside = setup.root / "outside.txt"
    outside.write_text("not a skill\n")
    entry = _entry(live.parent.name, live, proposed="../../../../../outside.txt")
    entry["sha256"] = sha256_bytes(outside.read_bytes())
    run = _run_with_manifest(setup, entry)
    code, out = _cli(capsys, setup, "adopt", "--run", str(run))
    assert code == 2 and "manifest" in out["message"]
    assert live.read_bytes() == before
