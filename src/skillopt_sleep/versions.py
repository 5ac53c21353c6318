"""The skill store as users see it: list, show, diff and restore versions of a skill.

Every version a night stages is kept in the project's :class:`SkillStore` (immutable
files, an index per skill). Here they are joined with what happened to them: the night's
score (from the run's ``report.json``), whether a receipt shows they were adopted, and
whether the live file holds them now. :func:`restore` puts an old version back through
the ordinary adoption (sha pins, confinement, backup, all or nothing, receipt), from a
one-file proposal written under ``<project state>/restores/``.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skillopt.errors import DataError, RefusedError, SkillOptError
from skillopt_sleep.adopt import AdoptResult, adopt
from skillopt_sleep.adopt_journal import receipts
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.rundir import RunDir
from skillopt_sleep.staging import (
    PROPOSAL_DIR,
    SKILL_FILE_NAME,
    ManifestEntry,
    Proposal,
    ProposalKind,
    SkillStore,
    SkillVersion,
    load_manifest,
    sha256_file,
    write_proposal,
)
from skillopt_sleep.state import project_dir, runs_dir

__all__ = [
    "RESTORES_DIR",
    "VersionRow",
    "diff_versions",
    "list_versions",
    "parse_ref",
    "restore",
    "restore_dirs",
    "skill_names",
]

RESTORES_DIR = "restores"
_REF = re.compile(r"^(?:(?P<name>[^@]+)@)?v?(?P<number>\d+)$")


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionRow:
    """One stored version and what became of it."""

    version: SkillVersion
    score: float | None
    adopted: bool
    live: bool

    def to_dict(self) -> dict[str, Any]:
        v = self.version
        return {
            "skill": v.name,
            "version": v.number,
            "night": v.night,
            "run_id": v.run_id,
            "parent": v.parent,
            "sha256": v.sha256,
            "created_at": v.created_at.isoformat(),
            "score": self.score,
            "adopted": self.adopted,
            "live": self.live,
        }


def _state(cfg: SleepConfig, project: Path) -> Path:
    return project_dir(cfg.state_path(), project)


def restore_dirs(cfg: SleepConfig, project: Path) -> list[Path]:
    """The one-file proposals ``versions restore`` adopted through, oldest first."""
    root = _state(cfg, project) / RESTORES_DIR
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def skill_names(cfg: SleepConfig, project: Path) -> list[str]:
    """The skills the store holds versions of."""
    root = SkillStore(_state(cfg, project)).root
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "index.json").is_file())


def _nights(cfg: SleepConfig, project: Path) -> list[Path]:
    return RunDir.list_runs(runs_dir(cfg.state_path(), project))


def _adopted(cfg: SleepConfig, project: Path) -> set[tuple[str, str]]:
    """(name, sha256) of every document a receipt says was written to a live file."""
    found: set[tuple[str, str]] = set()
    for folder in (*_nights(cfg, project), *restore_dirs(cfg, project)):
        try:
            rows = receipts(folder)
        except SkillOptError:
            continue
        found.update((str(r.get("name")), str(r.get("sha256_after"))) for r in rows)
    return found


def _scores(cfg: SleepConfig, project: Path) -> dict[tuple[str, str], float]:
    """(run id, skill) -> the score the night measured for the version it staged."""
    out: dict[tuple[str, str], float] = {}
    for run in _nights(cfg, project):
        try:
            report = json.loads((run / "report.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(report, dict):
            continue
        managed = Path(str(report.get("live_skill") or "")).parent.name
        if isinstance(report.get("candidate"), int | float) and managed:
            out[(run.name, managed)] = float(report["candidate"])
        for row in report.get("skills") or ():
            if isinstance(row, dict) and isinstance(row.get("candidate"), int | float):
                out[(run.name, str(row.get("name")))] = float(row["candidate"])
    return out


def list_versions(cfg: SleepConfig, project: Path, skill: str | None = None) -> list[VersionRow]:
    """Every stored version (of ``skill``, or of every skill), oldest first per skill."""
    store = SkillStore(_state(cfg, project))
    names = [skill] if skill else skill_names(cfg, project)
    adopted, scores = _adopted(cfg, project), _scores(cfg, project)
    rows: list[VersionRow] = []
    for name in names:
        versions = store.versions(name)
        if skill and not versions:
            raise DataError(f"the skill store has no versions of {name!r}")
        live_path = _live_path(cfg, project, name)
        live_sha = sha256_file(live_path) if live_path else ""
        rows.extend(
            VersionRow(
                version=v,
                score=scores.get((v.run_id, name)),
                adopted=(name, v.sha256) in adopted,
                live=v.sha256 == live_sha,
            )
            for v in versions
        )
    return rows


def parse_ref(ref: str, cfg: SleepConfig, project: Path, skill: str | None) -> tuple[str, int]:
    """``NAME@N``, or ``N`` / ``vN`` with ``--skill`` (or when the store holds one skill)."""
    match = _REF.match(ref.strip())
    if match is None:
        raise DataError(f"{ref!r} is not a version: use N, vN or SKILL@N")
    name = match.group("name") or skill
    if name is None:
        names = skill_names(cfg, project)
        if len(names) != 1:
            raise DataError(
                f"say which skill's version {ref} (SKILL@N or --skill NAME); the store holds "
                f"{', '.join(names) or 'no skills yet'}"
            )
        name = names[0]
    return name, int(match.group("number"))


def read_version(cfg: SleepConfig, project: Path, name: str, number: int) -> str:
    return SkillStore(_state(cfg, project)).read(name, number)


def diff_versions(
    cfg: SleepConfig, project: Path, old: tuple[str, int], new: tuple[str, int]
) -> str:
    """A unified diff from one stored version to another."""
    before = read_version(cfg, project, *old).splitlines(keepends=True)
    after = read_version(cfg, project, *new).splitlines(keepends=True)
    return "".join(
        difflib.unified_diff(
            before, after, fromfile=f"{old[0]}@v{old[1]}", tofile=f"{new[0]}@v{new[1]}"
        )
    )


def _manifest_entries(folder: Path) -> Iterator[ManifestEntry]:
    if not (folder / PROPOSAL_DIR / "manifest.json").is_file():
        return
    try:
        yield from load_manifest(folder).entries
    except SkillOptError:
        return


def _live_path(cfg: SleepConfig, project: Path, name: str) -> Path | None:
    """Where skill ``name`` lives: the managed skill's path (the config says) when that is
    the one named, else as the newest proposal of it says, if that is where one of the
    project's skills lives (``<root>/<name>/SKILL.md``, never the memory file): a file in
    the state directory is not trusted to name any other target."""
    managed = cfg.live_skill_path(project)
    if managed.parent.name == name:
        return managed
    memory = os.path.realpath(cfg.live_memory_path(project))
    for folder in reversed([*_nights(cfg, project), *restore_dirs(cfg, project)]):
        for entry in _manifest_entries(folder):
            if entry.name != name or entry.kind is not ProposalKind.SKILL:
                continue
            live = Path(entry.live_path)
            if (live.name, live.parent.name) == (SKILL_FILE_NAME, name) and (
                os.path.realpath(live) != memory
            ):
                return live
    return None


def restore(
    cfg: SleepConfig, project: Path, name: str, number: int, *, now: datetime | None = None
) -> AdoptResult:
    """Make version ``number`` of ``name`` the live skill again: a transactional adopt of
    that version (pins, confinement, backup, rollback), with a receipt."""
    text = read_version(cfg, project, name, number)
    live = _live_path(cfg, project, name)
    if live is None:
        raise DataError(f"no night staged skill {name!r}, so where it lives is not known")
    if live.is_file() and live.read_bytes() == text.encode("utf-8"):
        raise RefusedError(f"{live} already holds {name} v{number}; nothing to restore")
    now = now or datetime.now(UTC)
    folder = (
        _state(cfg, project)
        / RESTORES_DIR
        / f"{now.strftime('%Y%m%dT%H%M%S%fZ')}-{name}-v{number:04d}-{os.getpid()}"
    )
    write_proposal(
        folder,
        [Proposal(name=name, live_path=live, text=text, store_version=number)],
        run_id=folder.name,
        now=now,
    )
    roots = [str(r) for r in cfg.adopt_roots(project)]
    return adopt(folder, skill_roots=roots, select=[name], now=now)
