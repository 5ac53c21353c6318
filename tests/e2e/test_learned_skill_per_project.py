"""Two projects on one config each get a learned skill of their own, naming that project;
a user with the old shared learned skill is moved off it once, losing no learned line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skillopt.skilldoc import LEARNED_HEADING, Region
from skillopt_sleep.cli import main
from skillopt_sleep.config import MANAGED_SKILL
from skillopt_sleep.demo import DemoSetup, prepare_demo
from support.sleep_setup import write_config

SHARED_LINE = "Always answer in the house style agreed for proj-alpha."
SHARED = f"""---
name: {MANAGED_SKILL}
description: Conventions skillopt-sleep learned. Use it when working in proj-alpha.
---

# {MANAGED_SKILL}

{Region.LEARNED.start}
{LEARNED_HEADING}

- {SHARED_LINE}
{Region.LEARNED.end}
"""


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code = main([*argv, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    return out


def _second_project(first: DemoSetup, root: Path) -> Path:
    """Another demo project whose sessions sit in the first one's agent home."""
    other = prepare_demo(root)
    for folder in (other.claude_home / "projects").iterdir():
        target = first.claude_home / "projects" / folder.name
        target.mkdir(parents=True)
        for session in folder.iterdir():
            renamed = session.name.replace("00000000-", "11111111-", 1)
            text = session.read_text().replace('"00000000-', '"11111111-')
            (target / renamed).write_text(text)
    return other.project


def _front(text: str) -> str:
    return text.split("---")[1]


@pytest.mark.slow
def test_two_projects_get_two_learned_skills_each_naming_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = prepare_demo(tmp_path / "a")
    alpha = setup.project
    beta = _second_project(setup, tmp_path / "b")
    skills = setup.claude_home / "skills"
    for folder in skills.iterdir():  # no learned skill yet: the nights create them
        (folder / "SKILL.md").unlink()
        folder.rmdir()
    cfg = str(write_config(setup))
    paths = []
    for project in (alpha, beta):
        night = cli(capsys, "once", "--config", cfg, "--project", str(project))
        assert night["accepted"]
        adopted = cli(capsys, "adopt", "--config", cfg, "--project", str(project))
        paths += [Path(a["live_path"]) for a in adopted["adopted"] if a["kind"] == "skill"]
    assert len(paths) == 2 and paths[0] != paths[1]
    assert {p.parent for p in paths} == set(skills.iterdir())
    for path, own, other in ((paths[0], alpha, beta), (paths[1], beta, alpha)):
        front = _front(path.read_text())
        assert f"name: {path.parent.name}" in front and f"({own})" in front
        assert str(other) not in path.read_text()
    status = cli(capsys, "status", "--config", cfg, "--project", str(beta))
    assert status["learned_skill"]["path"] == str(paths[1]) and status["learned_skill"]["exists"]


@pytest.mark.slow
def test_the_shared_learned_skill_seeds_each_project_once_and_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = prepare_demo(tmp_path)
    proj = str(setup.project)
    own = setup.config.live_skill_path(setup.project)
    own.unlink()
    own.parent.rmdir()
    shared = setup.claude_home / "skills" / MANAGED_SKILL / "SKILL.md"
    shared.parent.mkdir(parents=True)
    shared.write_text(SHARED)
    cfg = str(write_config(setup))

    status = cli(capsys, "status", "--config", cfg, "--project", proj)
    assert status["learned_skill"]["shared_path"] == str(shared)
    assert "not adopted yet" in status["learned_skill"]["note"]
    night = cli(capsys, "once", "--config", cfg, "--project", proj)
    report = json.loads((Path(night["run_dir"]) / "report.json").read_text())
    moved = [n for n in report["notes"] if "one per project" in n]
    assert len(moved) == 1 and str(shared) in moved[0] and "1 learned line" in moved[0]
    assert night["accepted"]
    cli(capsys, "adopt", "--config", cfg, "--project", proj)
    text = own.read_text()
    assert SHARED_LINE in text  # the learned line came along
    assert "proj-alpha" not in _front(text) and f"({setup.project})" in _front(text)
    assert shared.read_text() == SHARED  # kept as it was
    status = cli(capsys, "status", "--config", cfg, "--project", proj)
    learned = status["learned_skill"]
    assert learned["exists"] and learned["seeded"]["lines"] == 1
    assert "remove it once every project has its own" in learned["note"]
    # the project has its own now: a later night reads it, never the shared file again
    again = cli(capsys, "dry-run", "--config", cfg, "--project", proj)
    report = json.loads((Path(again["run_dir"]) / "report.json").read_text())
    assert not [n for n in report["notes"] if str(shared) in n]
