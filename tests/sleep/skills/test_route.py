"""Finding the project's skills and routing each task to the one it exercised."""

from __future__ import annotations

from pathlib import Path

from skillopt.types import TaskRecord
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.skills import discover_skills, route_tasks
from skillopt_sleep.skills.discover import ProjectSkill
from skillopt_sleep.skills.route import MANAGED


def _skill(name: str, description: str = "") -> ProjectSkill:
    return ProjectSkill(name=name, path=Path(f"/p/{name}/SKILL.md"), text="", sha256="",
                        description=description)  # fmt: skip


def _task(tid: str, intent: str, hint: str = "") -> TaskRecord:
    return TaskRecord(id=tid, intent=intent, skill_hint=hint)


SKILLS = [
    _skill("release-notes", "Drafting the changelog entry for a version"),
    _skill("db-migrations", "Schema changes with alembic"),
]


def test_the_transcript_hint_decides() -> None:
    routing = route_tasks([_task("a", "anything at all", hint="db-migrations")], SKILLS)
    assert routing.tasks_of("db-migrations")[0].id == "a"
    assert "loaded" in routing.routes[0].why


def test_a_hint_for_a_skill_outside_the_project_stays_managed() -> None:
    routing = route_tasks([_task("a", "write release notes", hint="pdf")], SKILLS)
    assert routing.routes[0].skill == MANAGED and "pdf" in routing.routes[0].why


def test_relevance_match_explains_itself() -> None:
    routing = route_tasks([_task("a", "Add a migration for the users schema")], SKILLS)
    route = routing.routes[0]
    assert route.skill == "db-migrations"
    assert "migration" in route.why and "schema" in route.why


def test_ties_and_weak_matches_go_to_the_managed_skill() -> None:
    tie = _task("t", "release the migrations")  # one name word each: 3 vs 3
    weak = _task("w", "schema")  # one description word: below the bar
    routing = route_tasks([tie, weak], SKILLS)
    assert [r.skill for r in routing.routes] == [MANAGED, MANAGED]
    assert "tie" in routing.routes[0].why
    assert [t.id for t in routing.tasks_of(MANAGED)] == ["t", "w"]


def _write(root: Path, name: str, text: str = "# skill\n") -> Path:
    path = root / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_discovery_finds_every_root_and_leaves_out_what_it_cannot_use(tmp_path: Path) -> None:
    project = tmp_path / "project"
    _write(project / ".claude" / "skills", "release-notes",
           "---\nname: release-notes\ndescription: Changelog entries\n---\n# x\n")  # fmt: skip
    _write(project / ".agents" / "skills", "db-migrations")
    _write(project / ".claude" / "skills", "twice", "one\n")
    _write(project / ".cursor" / "skills", "twice", "two\n")
    _write(project / "extra", "from-config")
    outside = _write(tmp_path / "elsewhere", "escape")
    (project / ".codex" / "skills").mkdir(parents=True)
    (project / ".codex" / "skills" / "escape").symlink_to(outside.parent)
    (project / "CLAUDE.md").write_text("# memory\n")
    cfg = SleepConfig.model_validate(
        {"skill_path": str(_write(project / ".claude" / "skills", "managed")),
         "skills": {"roots": ["extra"]}}
    )  # fmt: skip
    found = discover_skills(cfg, project)
    assert [s.name for s in found.skills] == ["release-notes", "db-migrations", "from-config"]
    assert found.skills[0].description == "Changelog entries"
    why = dict(found.skipped)
    assert "two skills are named" in why["twice"]
    assert any("symlink" in w for w in why.values())
    assert found.memory == (project / "CLAUDE.md",)


def test_the_memory_file_is_agents_md_when_only_that_exists(tmp_path: Path) -> None:
    cfg = SleepConfig()
    assert cfg.live_memory_path(tmp_path) == tmp_path / "CLAUDE.md"
    (tmp_path / "AGENTS.md").write_text("# agents\n")
    assert cfg.live_memory_path(tmp_path) == tmp_path / "AGENTS.md"
    (tmp_path / "CLAUDE.md").write_text("# claude\n")
    assert cfg.live_memory_path(tmp_path) == tmp_path / "CLAUDE.md"
