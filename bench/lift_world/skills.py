"""A held-out world with three project skills of its own and one rule all of them need.

The lift world's tasks, conventions and baits, regrouped: the project keeps three skills
under ``.claude/skills`` (release notes, database migrations, tests), and every session
about a task of one of them loaded that skill (the agent's Skill tool). Each skill's
tasks need the skill's own convention (``news``, ``migration``, ``fixtures``); two or
three tasks of each also need the time format (``utc``), as do two of the tasks no skill
claims (which also need ``check`` or ``lookup``, as in the lift world). ``utc`` is the
shared rule: its place is the project memory, where every skill's tasks see it; in one
skill it solves only that skill's tasks.

A task is solved when its conventions are in the documents its agent reads: its skill's
``SKILL.md`` (the managed learned skill for the tasks no skill claims) and ``CLAUDE.md``
(:func:`true_score_routed`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from lift_world.world import BARE, CONVENTIONS, TASKS, Score, World, solves


@dataclass(frozen=True, kw_only=True)
class SkillSpec:
    """One of the project's skills: its folder name, description and seed text."""

    name: str
    description: str
    tasks: tuple[str, ...]  # ids of the tasks whose sessions load it
    own: str  # the convention only its tasks need

    @property
    def seed(self) -> str:
        title = self.name.replace("-", " ").capitalize()
        return (
            f"---\nname: {self.name}\ndescription: {self.description}\n---\n\n# {title}\n\n"
            "Keep the change small and say what you did.\n"
        )


SHARED = "utc"
SKILL_SPECS: tuple[SkillSpec, ...] = (
    SkillSpec(
        name="release-notes",
        own="news",
        description="Release notes, changelog entries and upgrade notes for users.",
        tasks=("t06", "t07", "t08", "t09", "t10", "t11"),
    ),
    SkillSpec(
        name="db-migrations",
        own="migration",
        description="Schema changes: migrations for tables, columns and indexes.",
        tasks=("t03", "t12", "t15", "t16", "t17"),
    ),
    SkillSpec(
        name="test-writing",
        own="fixtures",
        description="Writing and repairing tests and their test data.",
        tasks=("t01", "t13", "t18", "t19", "t20"),
    ),
)
NEEDS: dict[str, str] = {  # regrouped: each skill's convention, utc shared by all
    "t06": "news", "t07": "news utc", "t08": "news", "t09": "news utc", "t10": "news",
    "t11": "news utc",
    "t03": "migration", "t12": "migration utc", "t15": "migration", "t16": "migration utc",
    "t17": "migration",
    "t01": "fixtures", "t13": "fixtures utc", "t18": "fixtures", "t19": "fixtures utc",
    "t20": "fixtures",
    "t02": "check", "t04": "check", "t05": "check", "t14": "check utc",
}  # fmt: skip

SKILLS_WORLD = World(
    name="skills",
    conventions=CONVENTIONS,
    tasks=tuple(
        replace(t, needs=tuple(NEEDS[t.id].split())) if t.id in NEEDS else t for t in TASKS
    ),
    baits=(BARE,),
)
SKILL_OF: dict[str, str] = {t: s.name for s in SKILL_SPECS for t in s.tasks}


def true_score_routed(
    world: World, skill_of: Mapping[str, str], read_skill: Callable[[str], str], memory: str
) -> Score:
    """Share of tasks solved by the documents each task's agent reads: its skill (the
    managed one for ``""``) and the memory."""
    solved = 0
    present_all: set[str] = set()
    harmful_any = False
    for task in world.tasks:
        text = read_skill(skill_of.get(task.id, "")) + "\n" + memory
        present, harmful = world.conventions_in(text), world.harmful_in(text)
        present_all |= present
        harmful_any |= harmful
        solved += solves(task, present, harmful)
    return Score(solved=solved, total=len(world.tasks), present=frozenset(present_all),
                 harmful=harmful_any)  # fmt: skip


def misplaced(world: World, skill_texts: Mapping[str, str]) -> list[str]:
    """Rules staged where they do not belong: the shared rule in any skill (the managed
    one under ``""``), a skill's own rule in another project skill."""
    out: list[str] = []
    own = {s.name: s.own for s in SKILL_SPECS}
    for name, text in skill_texts.items():
        found = world.conventions_in(text)
        if SHARED in found:
            out.append(f"{SHARED} in {name or 'the managed skill'}")
        out += [f"{k} in {name}" for k in sorted(found) if name and k in set(own.values()) - {
            own[name]}]  # fmt: skip
    return out
