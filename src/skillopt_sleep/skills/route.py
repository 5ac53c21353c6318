"""Which skill each task exercised, with the reason the report shows.

1. The transcript's own hint (``TaskRecord.skill_hint``: the agent loaded the skill with
   its Skill tool, or read its ``SKILL.md``) decides when it names one of the project's
   skills.
2. Otherwise a relevance match: the words of the task's request against each skill's
   name (each word worth :data:`NAME_WEIGHT`) and description (each worth 1). The best
   skill wins when it scores at least :data:`MIN_SCORE` and strictly more than the next;
   the words that matched are the explanation.
3. Everything else, ties included, goes to the managed skill (``""``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from skillopt.types import TaskRecord
from skillopt_sleep.skills.discover import ProjectSkill

__all__ = ["MANAGED", "MIN_SCORE", "NAME_WEIGHT", "Route", "Routing", "route_tasks"]

MANAGED = ""
NAME_WEIGHT = 3
MIN_SCORE = 3
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    _WORD.findall(
        "the and for with that this from into when what which where your you use used using "
        "are was were have has had not but all any can will would should could its our "
        "about after before then than them they their there here also just only more most "
        "skill skills file files project code make please need want how why who does done"
    )
)


def _stem(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in _STOP}


@dataclass(frozen=True, slots=True)
class Route:
    task_id: str
    skill: str  # MANAGED for the managed skill
    why: str


@dataclass(frozen=True, slots=True)
class Routing:
    routes: tuple[Route, ...] = ()
    groups: dict[str, list[TaskRecord]] = field(default_factory=dict)  # skill -> its tasks

    def tasks_of(self, skill: str) -> list[TaskRecord]:
        return list(self.groups.get(skill, ()))

    def to_list(self) -> list[dict[str, str]]:
        return [{"task_id": r.task_id, "skill": r.skill, "why": r.why} for r in self.routes]


def _keywords(skill: ProjectSkill) -> dict[str, int]:
    weights = dict.fromkeys(words(skill.description), 1)
    weights.update(dict.fromkeys(words(skill.name.replace("-", " ").replace("_", " ")),
                                 NAME_WEIGHT))  # fmt: skip
    return weights


def _match(task: TaskRecord, skills: Sequence[ProjectSkill]) -> Route:
    asked = words(f"{task.intent} {' '.join(task.tags)}")
    scored: list[tuple[int, str, list[str]]] = []
    for skill in skills:
        weights = {w: n for w, n in _keywords(skill).items() if w in asked}
        scored.append((sum(weights.values()), skill.name, sorted(weights)))
    scored.sort(key=lambda row: -row[0])
    if not scored or scored[0][0] < MIN_SCORE:
        return Route(task.id, MANAGED, "no skill's name or description matches the request")
    best, name, hit = scored[0]
    if len(scored) > 1 and scored[1][0] == best:
        tie = f"a tie between {name} and {scored[1][1]} (score {best})"
        return Route(task.id, MANAGED, tie)
    runner = scored[1][0] if len(scored) > 1 else 0
    return Route(task.id, name, f"matched {', '.join(hit)} (score {best} vs {runner})")


def route_tasks(tasks: Sequence[TaskRecord], skills: Sequence[ProjectSkill]) -> Routing:
    """Every task to one skill (or the managed one), in the tasks' order."""
    names = {s.name for s in skills}
    routes: list[Route] = []
    groups: dict[str, list[TaskRecord]] = {}
    for task in tasks:
        hint = task.skill_hint
        if hint and hint in names:
            route = Route(task.id, hint, "the session loaded it (the agent's skill tool or file)")
        elif hint:
            route = Route(task.id, MANAGED, f"the session loaded {hint}, not a project skill")
        else:
            route = _match(task, skills)
        routes.append(route)
        groups.setdefault(route.skill, []).append(task)
    return Routing(routes=tuple(routes), groups=groups)
