"""The live documents as a night reads them (:func:`read_documents`).

1. The pins are the bytes on disk (``""`` = the file is absent).
2. The text has the reference tool's older region markers migrated, so a learned block
   written by it is the one the night edits, never a second one (a note says so).
3. A project with no learned skill of its own starts from the shared one's learned lines
   (:func:`skillopt_sleep.skills.managed.seed_from_shared`; a note says so).

``adopt --edit`` reads the documents the same way, so its check measures the night's own
starting point (and reads back the night's rollouts of it).

4. :func:`check_unchanged`: the pins checked again as each stage begins. A user who edits a
   live document while the night runs would have the night's work refused at staging, after
   every call; the night stops at the next stage instead (resumable), naming the file.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from skillopt.errors import RunFailedError
from skillopt.skilldoc import migrate_on_read
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.night.outcome import Live, read_live
from skillopt_sleep.skills.managed import seed_from_shared
from skillopt_sleep.staging import sha256_file

__all__ = ["check_unchanged", "read_documents"]


def read_documents(
    cfg: SleepConfig, project: Path, *, run_id: str, now: datetime, record: bool
) -> tuple[Live, list[str]]:
    """The live skill and memory with their pins, and the notes on what was done to them
    (``record``: the first seed from the shared skill is written down)."""
    notes: list[str] = []
    skill_path = cfg.live_skill_path(project)
    memory_path = cfg.live_memory_path(project)
    skill, skill_sha = read_live(skill_path)
    memory, memory_sha = read_live(memory_path)
    skill, memory = (_migrated(notes, path, text) for path, text in
                     ((skill_path, skill), (memory_path, memory)))  # fmt: skip
    seed = None
    if not skill_sha:
        seed = seed_from_shared(cfg, project, run_id=run_id, now=now, record=record)
    if seed is not None:
        notes.append(seed.note)
    live = Live(
        skill_path=skill_path,
        memory_path=memory_path,
        skill=seed.text if seed else skill,
        memory=memory,
        skill_sha=skill_sha,
        memory_sha=memory_sha,
        skill_seeded=seed is not None,
    )
    return live, notes


def _migrated(notes: list[str], path: Path, text: str) -> str:
    migration = migrate_on_read(text)
    if migration.markers:
        notes.append(
            f"{path.name}: {migration.markers} older skillopt-sleep region marker(s) migrated "
            "to the current ones; the proposal carries the migrated document"
        )
    return migration.text


def check_unchanged(live: Live, stage: str) -> None:
    """Raise :class:`RunFailedError` (stage ``stage``) when a live document no longer holds
    the bytes the night read: nothing learned from the old text could be staged on it."""
    for path, pinned in ((live.skill_path, live.skill_sha), (live.memory_path, live.memory_sha)):
        if sha256_file(path) != pinned:
            raise RunFailedError(
                stage,
                f"{path} changed while the night ran; it stopped before {stage} rather than "
                "spend calls on a proposal that could not be staged: run it again to resume "
                "on the file as it is now",
            )
