"""Transactional adoption of a staged proposal into the live files.

Order of operations for ``adopt(run_dir, skill_roots=..., select=...)``:

1. Take ``<run_dir>/.adopt.lock`` (``flock``: released by the kernel if we die).
2. Finish an adoption a killed process left behind (complete or roll back, see
   :mod:`skillopt_sleep.adopt_journal`).
3. Load the manifest; verify each selected proposed file against its sha256 pin.
4. Refuse: unknown or duplicate selections, re-adoption (receipts are append-only), a
   live path outside every skill root (by realpath), a symlinked or hard-linked live
   file, a realpath that moved, a live file whose bytes changed since staging.
5. Immutable backups of the live files (``adopt-backups/``, created, never replaced).
6. Write the journal, then replace each live file atomically (temp file + ``replace_fn``).
7. On any failure: restore every file already replaced, remove the journal, raise.
8. Append the receipts (one write), then remove the journal: the commit point.

A live file whose folder does not exist yet (the managed skill's own folder on a first
night) gets it created in step 6, one level at a time, only at or below a skill root and
never through a symlink; a rollback removes it again.

Memory files (``CLAUDE.md`` / ``AGENTS.md``) are confined like skills: their folder must
be under one of ``skill_roots`` (the CLI passes ``SleepConfig.adopt_roots``, nothing more).
Every other command finishes interrupted adoptions first too (:func:`recover_interrupted`),
so a reader never keeps seeing half of one.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from skillopt.atomicio import atomic_create_bytes
from skillopt.errors import (
    AdoptionError,
    CorruptStateError,
    DataError,
    LockHeldError,
    RefusedError,
)
from skillopt.logging import get_logger
from skillopt_sleep.adopt_journal import (
    BACKUP_DIR,
    JOURNAL_NAME,
    LOCK_NAME,
    AdoptedFile,
    JournalTarget,
    Recovery,
    ReplaceFn,
    RunLock,
    commit,
    make_dirs,
    receipts,
    recover_locked,
    remove_dirs,
    restore,
    write_file,
    write_journal,
)
from skillopt_sleep.staging import (
    ManifestEntry,
    load_manifest,
    read_pinned,
    sha256_bytes,
    sha256_file,
)

__all__ = [
    "JOURNAL_NAME",
    "LOCK_NAME",
    "SUBSETS_DIR",
    "SUBSET_FILE",
    "AdoptResult",
    "AdoptedFile",
    "AdoptionError",
    "Recovery",
    "adopt",
    "adopted_names",
    "check_adoptable",
    "pending",
    "recover",
    "recover_interrupted",
    "subset_dirs",
]

SUBSETS_DIR = "subsets"  # <run>/subsets/<check>: `adopt --edit` checks and adopts there
SUBSET_FILE = "subset.json"  # which edits, which of the night's proposals it settles

_log = get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class AdoptResult:
    run_dir: Path
    transaction: str
    adopted: tuple[AdoptedFile, ...]
    recovered: Recovery | None = None  # an interrupted adoption finished first

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "transaction": self.transaction,
            "adopted": [a.to_dict() for a in self.adopted],
            "recovered": self.recovered.to_dict() if self.recovered else None,
        }


def adopted_names(run_dir: str | os.PathLike[str]) -> set[str]:
    """Names already adopted from this run (from the append-only receipts), and the names
    an adopted subset of its edits (``adopt --edit``) stands in for."""
    root = Path(run_dir)
    names = {str(r.get("name")) for r in receipts(root)}
    for folder in subset_dirs(root):
        if receipts(folder):
            names.update(_settled(folder))
    return names


def subset_dirs(run_dir: Path) -> list[Path]:
    """The checks of edit subsets of this night (``<run>/subsets/*``), oldest first."""
    root = run_dir / SUBSETS_DIR
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def _settled(folder: Path) -> list[str]:
    try:
        data = json.loads((folder / SUBSET_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CorruptStateError(str(folder / SUBSET_FILE), f"unreadable ({exc})") from exc
    settles = data.get("settles") if isinstance(data, dict) else None
    return [str(n) for n in settles] if isinstance(settles, list) else []


def pending(run_dir: str | os.PathLike[str]) -> list[ManifestEntry]:
    """Proposal entries of a run not adopted yet (for ``status``)."""
    done = adopted_names(run_dir)
    return [e for e in load_manifest(run_dir).entries if e.name not in done]


def _within(real: str, roots: Sequence[str], *, or_at: bool = False) -> bool:
    return any(
        (real != root or or_at) and os.path.commonpath([real, root]) == root for root in roots
    )


def _missing_dirs(name: str, real: Path, roots: Sequence[str]) -> tuple[Path, ...]:
    """Directories to create for ``real`` (top first): each must lie at or below a root.

    ``real`` is fully resolved, so its existing ancestors are real directories and nothing
    created here goes through a symlink.
    """
    missing: list[Path] = []
    folder = real.parent
    while not folder.is_dir():
        if os.path.lexists(folder):
            raise RefusedError(f"{name}: {folder} exists and is not a directory")
        if not _within(str(folder), roots, or_at=True):
            raise RefusedError(
                f"{name}: {folder} does not exist and is outside the configured skill "
                "roots; create it yourself or add its parent to `skill_roots`"
            )
        missing.append(folder)
        folder = folder.parent
    return tuple(reversed(missing))


def _confine(entry: ManifestEntry, roots: Sequence[str]) -> tuple[Path, tuple[Path, ...]]:
    """The real live path and the directories adopting it has to create (top first)."""
    live = Path(entry.live_path)
    if not live.is_absolute():
        raise RefusedError(f"{entry.name}: live path {live} is not absolute")
    real = _inside_roots(entry.name, live, roots)
    if real != entry.live_realpath:
        raise RefusedError(f"{entry.name}: {live} now resolves to {real}, not the staged target")
    try:
        info = os.lstat(live)
    except FileNotFoundError:
        info = None
    if info is not None:
        if os.path.islink(live):
            raise RefusedError(f"{entry.name}: {live} is a symlink; refusing to write through it")
        if info.st_nlink > 1:
            raise RefusedError(f"{entry.name}: {live} has other hard links; refusing")
    return Path(real), _missing_dirs(entry.name, Path(real), roots)


def _inside_roots(name: str, live: Path, roots: Sequence[str]) -> str:
    """The real path of ``live``; refused when it is not under one of ``roots``."""
    real = os.path.realpath(live)
    if not _within(real, roots):
        raise RefusedError(
            f"{name}: {live} is outside the configured skill roots "
            f"({', '.join(roots)}); to allow it, add {Path(real).parent} to `skill_roots` "
            "in the sleep config"
        )
    return real


def check_adoptable(name: str, live: Path, skill_roots: Sequence[str | os.PathLike[str]]) -> None:
    """Refuse now what :func:`adopt` would refuse later about where ``live`` is (outside
    the roots, or a missing folder it could not create), so a night checks it before it
    spends anything."""
    roots = [os.path.realpath(r) for r in skill_roots]
    _missing_dirs(name, Path(_inside_roots(name, live, roots)), roots)


def _backup(run_dir: Path, entry: ManifestEntry, original: bytes) -> Path:
    digest = sha256_bytes(original)
    path = run_dir / BACKUP_DIR / f"{entry.kind.value}-{entry.name}.{digest[:12]}.md"
    if not atomic_create_bytes(path, original, mode=0o444) and sha256_file(path) != digest:
        raise CorruptStateError(str(path), "existing backup does not match")
    return path


# --------------------------------------------------------------------------- recovery


def recover(run_dir: str | os.PathLike[str]) -> Recovery | None:
    """Finish an adoption of this night that a killed process left behind, if any.

    :func:`adopt` does this itself; :func:`recover_interrupted` does it for many nights.
    """
    root = Path(run_dir)
    with RunLock(root):
        return recover_locked(root)


def recover_interrupted(run_dirs: Iterable[Path]) -> list[Recovery]:
    """Finish every interrupted adoption among ``run_dirs`` (commands call this first).

    A night whose adoption is running right now (its lock is held) is left to it.
    """
    done: list[Recovery] = []
    for run_dir in run_dirs:
        if not (run_dir / JOURNAL_NAME).exists():
            continue
        try:
            found = recover(run_dir)
        except LockHeldError:
            continue
        if found is not None:
            done.append(found)
    return done


# --------------------------------------------------------------------------- adopt


def _select(
    entries: Sequence[ManifestEntry], select: list[str] | None, done: set[str]
) -> list[ManifestEntry]:
    by_name = {e.name: e for e in entries}
    if select is None:
        chosen = [e for e in entries if e.name not in done]
        if not chosen:
            raise RefusedError("nothing left to adopt from this night")
        return chosen
    if not select:
        raise RefusedError("no proposal selected")
    if len(set(select)) != len(select):
        raise RefusedError(f"duplicate names in the selection: {select}")
    unknown = [n for n in select if n not in by_name]
    if unknown:
        raise RefusedError(f"not in this night's proposal: {unknown} (have {sorted(by_name)})")
    again = [n for n in select if n in done]
    if again:
        raise RefusedError(f"already adopted from this night: {again}")
    return [by_name[n] for n in select]


@dataclass(frozen=True, slots=True)
class _Step:
    entry: ManifestEntry
    live: Path
    proposed: bytes
    original: bytes | None  # None = the live file did not exist
    new_dirs: tuple[Path, ...] = ()  # folders to create first (a new managed skill's own)


def _prepare(root: Path, chosen: Sequence[ManifestEntry], roots: Sequence[str]) -> list[_Step]:
    """Every check that can refuse, done before anything is written."""
    plan: list[_Step] = []
    for entry in chosen:
        proposed = read_pinned(root / entry.proposed_file, entry.sha256)
        live, new_dirs = _confine(entry, roots)
        try:
            original: bytes | None = live.read_bytes()
        except FileNotFoundError:
            original = None
        current = "" if original is None else sha256_bytes(original)
        if current != entry.live_sha256:
            raise RefusedError(
                f"{entry.name}: {entry.live_path} changed since staging; "
                "discard this proposal and rerun the night"
            )
        plan.append(
            _Step(entry=entry, live=live, proposed=proposed, original=original, new_dirs=new_dirs)
        )
    return plan


def _targets(plan: Sequence[_Step], backups: dict[str, str]) -> list[JournalTarget]:
    return [
        JournalTarget(
            adopted=AdoptedFile(
                name=step.entry.name,
                kind=step.entry.kind.value,
                live_path=str(step.live),
                sha256_before=step.entry.live_sha256,
                sha256_after=step.entry.sha256,
                backup_path=backups[step.entry.name],
            ),
            original=step.original,
            new_dirs=step.new_dirs,
        )
        for step in plan
    ]


def _apply(root: Path, transaction: str, plan: Sequence[_Step], replace_fn: ReplaceFn) -> None:
    """Replace every live file, or restore every one already replaced and raise."""
    replaced: list[_Step] = []
    created: list[Path] = []
    try:
        for step in plan:
            replaced.append(step)
            created += make_dirs(step.new_dirs)
            write_file(step.live, step.proposed, replace_fn, transaction)
    except BaseException as exc:
        problems = []
        for step in reversed(replaced):
            before = "" if step.original is None else sha256_bytes(step.original)
            try:
                if sha256_file(step.live) != before:
                    restore(step.live, step.original, transaction)
            except OSError as undo_exc:
                problems.append(f"{step.live}: {undo_exc}")
        remove_dirs(created)
        if problems:
            raise CorruptStateError(
                str(root / JOURNAL_NAME), f"rollback incomplete: {problems}; journal kept"
            ) from exc
        (root / JOURNAL_NAME).unlink(missing_ok=True)
        if isinstance(exc, Exception):
            raise AdoptionError(f"adoption failed and was rolled back: {exc}") from exc
        raise


def adopt(
    run_dir: str | os.PathLike[str],
    *,
    skill_roots: Sequence[str | os.PathLike[str]],
    select: list[str] | None = None,
    replace_fn: ReplaceFn = os.replace,
    now: datetime | None = None,
) -> AdoptResult:
    """Adopt the selected proposals (``None`` = every one not yet adopted), all or nothing.

    Raises :class:`RefusedError` when the user must act first (changed live file, path
    outside the roots, re-adoption, bad selection), :class:`AdoptionError` when writing
    failed and everything was restored, :class:`CorruptStateError` if staged bytes
    do not match their pins. ``replace_fn`` exists so tests can inject a failure.
    """
    root = Path(run_dir)
    if not root.is_dir():
        raise DataError(f"{root}: no such run directory")
    roots = [os.path.realpath(r) for r in skill_roots]
    if not roots:
        raise RefusedError("no skill roots configured; adoption is confined to them")
    with RunLock(root):
        recovered = recover_locked(root, now)
        manifest = load_manifest(root)
        plan = _prepare(root, _select(manifest.entries, select, adopted_names(root)), roots)
        backups = {
            step.entry.name: ""
            if step.original is None
            else str(_backup(root, step.entry, step.original))
            for step in plan
        }
        transaction = uuid.uuid4().hex
        targets = _targets(plan, backups)
        write_journal(root, transaction, targets)
        _apply(root, transaction, plan, replace_fn)
        adopted = tuple(t.adopted for t in targets)
        commit(root, transaction, adopted, now)
    _log.info("adopt.done", run_dir=str(root), adopted=[a.name for a in adopted])
    return AdoptResult(run_dir=root, transaction=transaction, adopted=adopted, recovered=recovered)
