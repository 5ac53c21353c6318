"""`adopt --skill` / `--all` on a night with per-skill proposals; a bare adopt lists them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skillopt_sleep.cli import main
from skillopt_sleep.staging import Proposal, ProposalKind, write_proposal

SKILLS = ("release-notes", "db-migrations", "api-docs")


@pytest.fixture
def night(tmp_path: Path) -> dict[str, Path]:
    """A run whose proposal holds the managed memory plus three of the project's skills."""
    project = tmp_path / "project"
    roots = project / ".claude" / "skills"
    proposals = []
    for name in SKILLS:
        (roots / name).mkdir(parents=True)
        (roots / name / "SKILL.md").write_text(f"# {name}\noriginal\n")
        proposals.append(
            Proposal(name=name, live_path=roots / name / "SKILL.md",
                     text=f"# {name}\nimproved\n", fanout=True)
        )  # fmt: skip
    (project / "CLAUDE.md").write_text("# memory\n")
    proposals.append(
        Proposal(name="CLAUDE", live_path=project / "CLAUDE.md", text="# memory\nbetter\n",
                 kind=ProposalKind.MEMORY)
    )  # fmt: skip
    run = tmp_path / "run"
    write_proposal(run, proposals, run_id="r1")
    config = tmp_path / "sleep.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\nskill_roots = ["{project}"]\n')
    return {"project": project, "run": run, "config": config, "roots": roots}


def _adopt(
    capsys: pytest.CaptureFixture[str], night: dict[str, Path], *flags: str
) -> tuple[int, Any]:
    code = main(["adopt", "--json", "--config", str(night["config"]), "--project",
                 str(night["project"]), "--run", str(night["run"]), *flags])  # fmt: skip
    return code, json.loads(capsys.readouterr().out)


def _live(night: dict[str, Path], name: str) -> str:
    return (night["roots"] / name / "SKILL.md").read_text()


def test_bare_adopt_lists_the_proposals_and_adopts_nothing(
    night: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _adopt(capsys, night)
    assert code == 2 and out["error"] == "selection_required"
    assert set(out["available"]) == {*SKILLS, "CLAUDE"}
    assert all("original" in _live(night, n) for n in SKILLS)
    assert not (night["run"] / "adoptions.jsonl").exists()


def test_adopt_named_skills_then_the_rest(
    night: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _adopt(capsys, night, "--skill", "release-notes", "--skill", "api-docs")
    assert code == 0, out
    assert {a["name"] for a in out["adopted"]} == {"release-notes", "api-docs"}
    assert "improved" in _live(night, "release-notes") and "improved" in _live(night, "api-docs")
    assert "original" in _live(night, "db-migrations")
    code, out = _adopt(capsys, night, "--skill", "release-notes")
    assert code == 2 and "already adopted" in out["message"]
    code, out = _adopt(capsys, night, "--all-skills")
    assert code == 0 and {a["name"] for a in out["adopted"]} == {"db-migrations", "CLAUDE"}


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (("--skill", "release-notes", "--all"), "invalid_selection"),
        (("--skill", " "), "invalid_selection"),
        (("--skill", "no-such-skill"), "RefusedError"),
        (("--skill", "api-docs", "--skill", "api-docs"), "RefusedError"),
    ],
)
def test_bad_selections_are_refused_before_any_write(
    night: dict[str, Path], capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], error: str
) -> None:
    code, out = _adopt(capsys, night, *flags)
    assert code == 2 and out["error"] == error
    assert all("original" in _live(night, n) for n in SKILLS)


def test_bare_adopt_takes_everything_when_configured(
    night: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    night["config"].write_text(night["config"].read_text() + 'bare_adopt = "all"\n')
    code, out = _adopt(capsys, night)
    assert code == 0 and len(out["adopted"]) == 4
