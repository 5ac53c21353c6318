"""One night over a project with three skills of its own: each learns on its tasks, is
staged as its own proposal, and `adopt --skill` applies exactly the ones named."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from skillopt.backends.mock import World
from skillopt_sleep.cli import main
from skillopt_sleep.demo import DemoSetup
from skillopt_sleep.night.entry import run_night
from support.sleep_setup import once, write_config
from support.three_skills import SKILLS, skill_text, three_skills_project

RULES = {r.key: r.text for r in World().rules}


@pytest.fixture
def three_skills(tmp_path: Path) -> DemoSetup:
    return three_skills_project(tmp_path)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_one_night_three_skills_then_adopt_by_name(
    three_skills: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = three_skills
    common = ("--config", str(write_config(setup)), "--project", str(setup.project))
    before = {name: skill_text(setup, name) for name in SKILLS}
    code, night = cli(capsys, "once", *common)
    assert code == 0, night
    run = Path(night["run_dir"])
    report = json.loads((run / "report.json").read_text())
    rows = {row["name"]: row for row in report["skills"]}
    assert set(rows) == set(SKILLS)
    assert rows["code-search"]["tasks"] == 4 and rows["code-search"]["routed_by_hint"] == 4
    assert rows["git-commits"]["routed_by_match"] == 1
    assert report["managed_tasks"] == 2
    for name, rule in (
        ("code-search", "cite"),
        ("bug-fixing", "tests"),
        ("git-commits", "commits"),
    ):
        assert rows[name]["status"] == "accepted" and rows[name]["staged"], rows[name]
        assert RULES[rule] in rows[name]["accepted_edits"]
        assert Path(rows[name]["run_dir"]).is_relative_to(run)
    # each skill learned only what its own tasks needed
    assert RULES["tests"] not in rows["code-search"]["accepted_edits"]
    markdown = (run / "report.md").read_text()
    assert "## Your skills" in markdown and "12 of the tasks went to 3 of your own" in markdown
    assert "Your skill code-search: accepted on 4 task(s)" in (run / "report.html").read_text()
    assert {name: skill_text(setup, name) for name in SKILLS} == before  # staged, not adopted

    code, listed = cli(capsys, "adopt", *common)
    assert code == 2 and set(SKILLS) <= set(listed["available"])
    code, adopted = cli(capsys, "adopt", *common, "--skill", "code-search",
                        "--skill", "bug-fixing")  # fmt: skip
    assert code == 0, adopted
    assert {a["name"] for a in adopted["adopted"]} == {"code-search", "bug-fixing"}
    assert RULES["cite"] in skill_text(setup, "code-search")
    assert RULES["tests"] in skill_text(setup, "bug-fixing")
    assert skill_text(setup, "git-commits") == before["git-commits"]
    assert skill_text(setup, "code-search").startswith(before["code-search"].split("# code")[0])
    code, versions = cli(capsys, "versions", *common, "--skill", "code-search")
    assert code == 0
    [v1] = versions["versions"]
    assert v1["adopted"] and v1["live"] and v1["score"] == rows["code-search"]["candidate"]


@pytest.mark.slow
@pytest.mark.parametrize("auto", ["true", '"all"'])
def test_auto_adopt_takes_per_skill_proposals_only_when_all(
    three_skills: DemoSetup, capsys: pytest.CaptureFixture[str], auto: str
) -> None:
    setup = three_skills
    config = write_config(setup, extra=f"auto_adopt = {auto}")
    common = ("--config", str(config), "--project", str(setup.project))
    before = {name: skill_text(setup, name) for name in SKILLS}
    code, night = cli(capsys, "once", *common)
    assert code == 0, night
    report = json.loads((Path(night["run_dir"]) / "report.json").read_text())
    changed = {name for name in SKILLS if skill_text(setup, name) != before[name]}
    code, status = cli(capsys, "status", *common)
    waiting = {p["name"] for p in status["pending_proposals"] if p["fanout"]}
    if auto == "true":
        assert changed == set() and waiting == set(SKILLS)
        assert str(setup.config.live_memory_path(setup.project)) in report["auto_adopted"]
    else:
        assert changed == set(SKILLS) and waiting == set()


def _learned(report: dict[str, Any]) -> dict[str, tuple[str, list[str]]]:
    return {row["name"]: (row["status"], row["accepted_edits"]) for row in report["skills"]}


@pytest.mark.slow
def test_a_killed_night_resumes_every_skill_to_the_same_decision(tmp_path: Path) -> None:
    reference = three_skills_project(tmp_path / "reference")
    done = once(write_config(reference), reference.project)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = _learned(json.loads((Path(json.loads(done.stdout)["run_dir"]) /
                                    "report.json").read_text()))  # fmt: skip

    setup = three_skills_project(tmp_path / "killed")
    config = write_config(setup)
    killed = once(config, setup.project, "rollouts")  # the managed night's first stage
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    [run] = [p.parent for p in (setup.state_dir / "projects").glob("*/runs/*/run.json")]
    children = sorted(run.glob("skills/*/*/run.json"))
    assert len(children) == len(SKILLS)
    resumed = once(config, setup.project)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads(resumed.stdout)["resumed"] is True
    assert _learned(json.loads((run / "report.json").read_text())) == expected
    for child in children:
        journal = json.loads(child.read_text())
        assert journal["resumed"] and journal["status"] == "complete", child


class _EditsSkillAtStaging:
    """The user edits one skill while the night runs (just before it stages)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def stage_started(self, name: str) -> None:
        if name == "stage":
            self.path.write_text(self.path.read_text() + "\n- my own new line\n")

    def stage_ended(self, name: str) -> None:
        return None

    def rollouts_recorded(self, total: int) -> None:
        return None


@pytest.mark.slow
async def test_a_skill_edited_during_the_night_is_not_staged_and_the_others_are(
    three_skills: DemoSetup,
) -> None:
    setup = three_skills
    edited = setup.project / ".claude" / "skills" / "bug-fixing" / "SKILL.md"
    outcome = await run_night(setup.config, project=setup.project,
                              observer=_EditsSkillAtStaging(edited))  # fmt: skip
    report = json.loads((outcome.run_dir / "report.json").read_text())
    rows = {row["name"]: row for row in report["skills"]}
    assert (
        not rows["bug-fixing"]["staged"]
        and "changed while the night ran" in (rows["bug-fixing"]["reason"])
    )
    assert rows["code-search"]["staged"] and rows["git-commits"]["staged"]
    names = {e["name"] for e in json.loads(
        (outcome.run_dir / "proposal" / "manifest.json").read_text())["entries"]}  # fmt: skip
    assert {"code-search", "git-commits"} <= names and "bug-fixing" not in names
    assert edited.read_text().endswith("- my own new line\n")


async def test_the_spend_estimate_counts_each_skills_learning(three_skills: DemoSetup) -> None:
    setup = three_skills
    outcome = await run_night(setup.config, project=setup.project)
    assert outcome.run_dir is not None
    report = json.loads((outcome.run_dir / "report.json").read_text())
    detail, spent = report["estimate_detail"], report["spend"]["calls"]
    assert set(detail["by_skill"]) == set(SKILLS)
    learning = sum(n for s, n in detail["by_stage"].items() if s not in ("mine", "test"))
    for child in outcome.run_dir.glob("skills/*/*/run.json"):
        calls = sum(s.get("model_calls") or 0 for s in json.loads(child.read_text())["stages"])
        assert calls > 0 and 0 < detail["by_skill"][child.parent.parent.name] < learning, child
    assert sum(detail["by_skill"].values()) < learning  # the managed night has tasks too
    assert spent / 3 <= detail["calls"] <= 3 * spent, (spent, detail)  # a first night: a prior
    assert "of which your skills: " in report["estimate"]


async def test_the_live_display_shows_each_skills_calls(three_skills: DemoSetup) -> None:
    import io

    from skillopt_sleep.night_progress import TtyProgress

    screen = io.StringIO()
    live = TtyProgress(screen, min_interval=0.0, keep_stage_lines=True)
    outcome = await run_night(three_skills.config, project=three_skills.project, progress=live)
    assert outcome.run_dir is not None
    shown = screen.getvalue()
    for name in SKILLS:
        calls = re.findall(rf"skill {name} (\d+)", shown)
        assert calls and int(calls[-1]) > 0, name  # a live counter of the skill's calls
        assert re.search(rf"your skill {name}: accepted on \d+ task\(s\), \d+ model call", shown)


def test_the_harvest_preview_says_which_skill_each_task_goes_to_and_why(
    three_skills: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = three_skills
    common = ("--config", str(write_config(setup)), "--project", str(setup.project), "--no-llm")
    code, preview = cli(capsys, "harvest", *common)
    assert code == 0, preview
    assert sorted(preview["skills"]) == sorted(SKILLS)
    intents = {t["id"]: t["intent"] for t in preview["tasks"]}
    routes = {intents[r["task_id"]]: r for r in preview["routes"]}
    assert routes["Where is the retry delay computed?"]["skill"] == "code-search"
    assert "loaded it" in routes["Where is the retry delay computed?"]["why"]
    drafted = routes["Draft the commit message for the docs update"]
    assert drafted["skill"] == "git-commits" and "matched" in drafted["why"]
    assert routes["Add a --verbose option to the command line tool"]["skill"] == ""
    assert main(["harvest", *common]) == 0
    shown = capsys.readouterr().out
    assert "3 project skill(s) a night learns on" in shown
    assert "-> skill code-search: the session loaded it" in shown
    assert "-> skill git-commits: matched commit (score 3 vs 0)" in shown
    assert "-> the managed skill: no skill's name or description matches" in shown
