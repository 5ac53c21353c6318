"""A project with three skills of its own and sessions that exercised them: the fan-out's
test bed (tests/sleep/night/test_run_skills.py, tests/e2e/test_skills_http.py)."""

from __future__ import annotations

import json
import shutil
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from skillopt_sleep.demo import DemoSetup, prepare_demo

__all__ = [
    "QUIET_SESSIONS",
    "SESSIONS",
    "SHARED_SESSIONS",
    "SKILLS",
    "skill_text",
    "three_skills_project",
]

SKILLS = {
    "code-search": "Finding code: answer where something is defined or handled.",
    "bug-fixing": "Repairing defects the user reports in this application.",
    "git-commits": "Writing git history for this repository.",
}
SESSIONS: list[tuple[str, str]] = [  # (request, the skill the agent loaded; "" = none)
    ("Where is the retry delay computed?", "code-search"),
    ("Locate the place where we parse the settings file", "code-search"),
    ("Which file defines the User model?", "code-search"),
    ("Where do we configure the logging format?", "code-search"),
    ("Fix the failing login test in the auth module", "bug-fixing"),
    ("The CSV export is broken for names with accents, please fix it", "bug-fixing"),
    ("Fix the off-by-one bug in the pagination helper", "bug-fixing"),
    ("The date picker is broken on Safari, can you fix it?", "bug-fixing"),
    ("Write the commit message for the cache refactor", "git-commits"),
    ("Write a commit message for the logging cleanup", "git-commits"),
    ("Write the commit message for the parser speedup", "git-commits"),
    ("Draft the commit message for the docs update", ""),  # routed by relevance
    ("Add a --verbose option to the command line tool", ""),
    ("Rename the fetch_all helper to load_all everywhere", ""),
]

# :data:`SESSIONS` with a managed task one night can solve ("everywhere" in the rename
# request asks for the code-search rule too, which no night can learn from a lone task):
# one night learns everything, so the nights after its adoption are quiet.
QUIET_SESSIONS: list[tuple[str, str]] = [
    (request.replace("everywhere", "in the api module"), skill) for request, skill in SESSIONS
]

# Every task goes to a skill, and two of each skill's need the mock world's memory rule
# (``changelog``: "feature", "release", "rename", "option") besides the skill's own rule.
SHARED_SESSIONS: list[tuple[str, str]] = [
    ("Where is the retry delay computed?", "code-search"),
    ("Which file defines the User model?", "code-search"),
    ("Where is the feature flag for exports defined?", "code-search"),
    ("Locate the option parser of the command line tool", "code-search"),
    ("Fix the failing login test in the auth module", "bug-fixing"),
    ("Fix the off-by-one bug in the pagination helper", "bug-fixing"),
    ("The release build is broken, please fix it", "bug-fixing"),
    ("Fix the broken --quiet option", "bug-fixing"),
    ("Write the commit message for the cache refactor", "git-commits"),
    ("Write a commit message for the logging cleanup", "git-commits"),
    ("Write the commit message for the new export feature", "git-commits"),
    ("Write the commit message for the rename of fetch_all", "git-commits"),
]


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _session(home: Path, project: Path, index: int, request: str, skill: str) -> None:
    sid = str(uuid.UUID(int=1000 + index))
    path = home / "projects" / str(project).replace("/", "-") / f"{sid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    at = datetime.now(UTC) - timedelta(hours=30 - index)
    base: dict[str, Any] = {"cwd": str(project), "sessionId": sid, "gitBranch": "main"}
    blocks: list[dict[str, Any]] = [{"type": "text", "text": "Done."}]
    if skill:
        blocks.insert(0, {"type": "tool_use", "id": f"t{index}", "name": "Skill",
                          "input": {"skill": skill}})  # fmt: skip
    lines = [
        {**base, "type": "user", "timestamp": _iso(at),
         "message": {"role": "user", "content": request}},
        {**base, "type": "assistant", "timestamp": _iso(at + timedelta(minutes=1)),
         "message": {"role": "assistant", "content": blocks}},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def three_skills_project(root: Path, sessions: list[tuple[str, str]] = SESSIONS) -> DemoSetup:
    """The demo layout with ``sessions`` as its only sessions and :data:`SKILLS` as the
    project's own skills under ``.claude/skills``."""
    setup = prepare_demo(root)
    shutil.rmtree(setup.claude_home / "projects")  # only this test's sessions
    for index, (request, skill) in enumerate(sessions):
        _session(setup.claude_home, setup.project, index, request, skill)
    for name, description in SKILLS.items():
        path = setup.project / ".claude" / "skills" / name / "SKILL.md"
        path.parent.mkdir(parents=True)
        path.write_text(f"---\nname: {name}\ndescription: {description}\n---\n\n# {name}\n")
    return setup


def skill_text(setup: DemoSetup, name: str) -> str:
    return (setup.project / ".claude" / "skills" / name / "SKILL.md").read_text()
