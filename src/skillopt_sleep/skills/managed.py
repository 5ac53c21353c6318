"""Each project's own learned skill, and the one-time move off the skill all projects shared.

1. The default learned skill is the project's own: ``<skills>/<managed_skill_name>/SKILL.md``
   (:func:`skillopt_sleep.config.managed_skill_name`), its front matter naming the project.
2. Before that, every project's nights wrote one file, ``<skills>/skillopt-sleep-learned``,
   whose front matter named whichever project came first. While a project has no learned
   skill of its own and that shared file exists, the project's night starts from the shared
   file's learned block under the project's own front matter (:func:`seed_from_shared`):
   the lines the agent already followed are carried over, never lost. Adopting the night's
   proposal creates the project's own file; from then on the shared one is not read.
3. The shared file is never written or removed here. The first night that seeds a project
   records it once in the project's state folder (``skill_seed.json``: from where, how many
   lines, when); the report's notes and ``status`` say what happened and what to do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from skillopt.atomicio import atomic_write_json
from skillopt.logging import get_logger
from skillopt.skilldoc import learned_bullets, migrate_on_read
from skillopt_sleep.config import SleepConfig, managed_skill_name
from skillopt_sleep.staging import scaffold_skill, staged_text
from skillopt_sleep.state import project_dir

__all__ = [
    "SEED_FILE",
    "Seed",
    "SeedRecord",
    "learned_skill_status",
    "read_seed",
    "seed_from_shared",
]

SEED_FILE = "skill_seed.json"
_log = get_logger(__name__)


class SeedRecord(BaseModel):
    """The first night a project's learned skill was seeded from the shared one."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    source: str
    target: str
    lines: int
    run_id: str
    at: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Seed:
    """The document a night starts from for a project with no learned skill yet."""

    source: Path
    text: str
    lines: int
    note: str


def _seed_path(cfg: SleepConfig, project: Path) -> Path:
    return project_dir(cfg.state_path(), project) / SEED_FILE


def read_seed(cfg: SleepConfig, project: Path) -> SeedRecord | None:
    """The recorded seed, if the project's learned skill was ever seeded (unreadable = none)."""
    try:
        return SeedRecord.model_validate_json(_seed_path(cfg, project).read_bytes())
    except (OSError, ValueError):
        return None


def _shared_text(cfg: SleepConfig, project: Path) -> tuple[Path, str] | None:
    """The shared learned skill when this project has none of its own yet."""
    shared = cfg.shared_skill_path()
    own = cfg.live_skill_path(project)
    if shared is None or own.exists() or not shared.is_file():
        return None
    if os.path.realpath(shared) == os.path.realpath(own):
        return None
    try:
        return shared, shared.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _log.warning("learned_skill.shared_unreadable", path=str(shared), error=str(exc))
        return None


def seed_from_shared(
    cfg: SleepConfig, project: Path, *, run_id: str, now: datetime, record: bool
) -> Seed | None:
    """The project's first learned skill, seeded from the shared file's learned block
    (``None``: the project has its own, or there is nothing to carry over). ``record``
    writes the one-time record when there is none yet (never on a dry run)."""
    found = _shared_text(cfg, project)
    if found is None:
        return None
    shared, text = found
    text = migrate_on_read(text).text  # a block the reference tool wrote counts too
    lines = len(learned_bullets(text))
    if not lines:
        return None
    own = cfg.live_skill_path(project)
    base = scaffold_skill("", name=managed_skill_name(project), project=project)
    seeded = staged_text(base, text)
    earlier = read_seed(cfg, project)
    if earlier is None and record:
        atomic_write_json(
            _seed_path(cfg, project),
            SeedRecord(
                source=str(shared), target=str(own), lines=lines, run_id=run_id, at=now.isoformat()
            ).model_dump(),
        )
    if earlier is None:
        note = (
            f"learned skills are now one per project: this project's is {own} (until now every "
            f"project shared {shared}). Tonight starts from the shared file's {lines} learned "
            "line(s), so none is lost; adopting the proposal creates the project's own file. "
            f"{shared} is kept as it is: remove it once every project has its own"
        )
    else:
        note = (
            f"{own} does not exist yet: the night starts from the {lines} learned line(s) of "
            f"the shared {shared} (first carried over {earlier.at[:10]})"
        )
    return Seed(source=shared, text=seeded, lines=lines, note=note)


def learned_skill_status(cfg: SleepConfig, project: Path) -> dict[str, Any]:
    """Where the project's learned skill lives and how far the move off the shared file is."""
    own = cfg.live_skill_path(project)
    shared = cfg.shared_skill_path()
    seed = read_seed(cfg, project)
    data: dict[str, Any] = {
        "path": str(own),
        "exists": own.is_file(),
        "shared_path": str(shared) if shared is not None and shared.is_file() else None,
        "seeded": seed.model_dump() if seed else None,
    }
    if data["shared_path"] and not data["exists"]:
        data["note"] = (
            f"not adopted yet: nights start from the learned lines of the shared {shared}"
        )
    elif data["shared_path"]:
        data["note"] = (
            f"the shared {shared} (one file for every project, before each had its own) is "
            "still there and agents load it in every project: remove it once every project "
            "has its own"
        )
    return data
