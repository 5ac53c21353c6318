"""Where a project keeps its own skills, and which of them a night can work on.

A skill is ``<root>/<name>/SKILL.md``. The roots, in order: the project's
``.claude/skills``, ``.agents/skills``, ``.cursor/skills``, ``.codex/skills``, then
``skills.roots`` from the config (relative = under the project). A skill is left out,
with the reason kept for the report, when its folder name is not a safe name, its file
leaves the root through a symlink, it is not UTF-8, or another root has a different skill
of the same name (which one the agent loads is not ours to guess). The managed skill
(``skill_path``) is the night's own and never listed here. The memory files an agent
reads in the project (``CLAUDE.md``, ``AGENTS.md``) are listed too.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from skillopt.errors import DataError
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.staging import MEMORY_FILE_NAMES, SKILL_FILE_NAME, check_name, sha256_bytes

__all__ = ["PROJECT_SKILL_DIRS", "Discovery", "ProjectSkill", "discover_skills"]

PROJECT_SKILL_DIRS = (".claude/skills", ".agents/skills", ".cursor/skills", ".codex/skills")
MEMORY_FILES = MEMORY_FILE_NAMES
SKILL_FILE = SKILL_FILE_NAME
_FRONT_KEY = re.compile(r"^(name|description):\s*(.*)$")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectSkill:
    """One of the project's skills as the night found it (its bytes pinned)."""

    name: str
    path: Path
    text: str
    sha256: str
    description: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Discovery:
    skills: tuple[ProjectSkill, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()  # (name or path, why)
    memory: tuple[Path, ...] = ()
    roots: tuple[Path, ...] = field(default_factory=tuple)

    def find(self, name: str) -> ProjectSkill | None:
        return next((s for s in self.skills if s.name == name), None)


def front_matter(text: str) -> dict[str, str]:
    """``name`` and ``description`` from a ``---`` front matter block (one line each)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    out: dict[str, str] = {}
    for line in lines[1:40]:
        if line.strip() == "---":
            break
        match = _FRONT_KEY.match(line)
        if match:
            out[match.group(1)] = match.group(2).strip().strip("\"'")
    return out


def skill_roots(cfg: SleepConfig, project: Path) -> list[Path]:
    configured = [p.expanduser() for p in cfg.skills.roots]
    candidates = [project / d for d in PROJECT_SKILL_DIRS]
    candidates += [p if p.is_absolute() else project / p for p in configured]
    seen: set[str] = set()
    roots: list[Path] = []
    for root in candidates:
        real = os.path.realpath(root)
        if root.is_dir() and real not in seen:
            seen.add(real)
            roots.append(root)
    return roots


def _read(root: Path, folder: Path) -> ProjectSkill | str:
    """The skill in ``folder``, or why it is left out."""
    try:
        name = check_name(folder.name)
    except DataError as exc:
        return str(exc)
    path = folder / SKILL_FILE
    real, real_root = os.path.realpath(path), os.path.realpath(root)
    if os.path.commonpath([real, real_root]) != real_root:
        return f"{path} leaves {root} through a symlink"
    try:
        data = path.read_bytes()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"{path} is unreadable or not UTF-8 ({exc})"
    return ProjectSkill(
        name=name,
        path=path,
        text=text,
        sha256=sha256_bytes(data),
        description=front_matter(text).get("description", ""),
    )


def discover_skills(cfg: SleepConfig, project: Path) -> Discovery:
    """The project's skills a night can learn on, and those it must leave alone."""
    managed = os.path.realpath(cfg.live_skill_path(project))
    roots = skill_roots(cfg, project)
    found: dict[str, ProjectSkill] = {}
    skipped: dict[str, str] = {}
    for root in roots:
        for folder in sorted(p for p in root.iterdir() if (p / SKILL_FILE).is_file()):
            if os.path.realpath(folder / SKILL_FILE) == managed:
                continue
            got = _read(root, folder)
            if isinstance(got, str):
                skipped[str(folder)] = got
                continue
            other = found.get(got.name)
            if other is not None and os.path.realpath(other.path) != os.path.realpath(got.path):
                skipped[got.name] = f"two skills are named {got.name!r}: {other.path}, {got.path}"
            elif other is None and got.name not in skipped:
                found[got.name] = got
    for name in skipped:
        found.pop(name, None)
    memory = tuple(project / m for m in MEMORY_FILES if (project / m).is_file())
    return Discovery(
        skills=tuple(found.values()),
        skipped=tuple(skipped.items()),
        memory=memory,
        roots=tuple(roots),
    )
