"""The one directory walk every transcript source lists its files with, tolerant of what it meets.

Agents create and remove session folders while a harvest walks them, and a user's home can
hold anything: an unreadable folder, a symlink loop, a symlink to ``/``. The walk

1. lists a folder with :func:`os.scandir`; a folder that vanished meanwhile is skipped (nothing
   was lost: it is gone), a folder it cannot read is yielded as :class:`~.refs.Unreadable`
   (counted and reported by the harvest, never silently skipped);
2. follows the root when it is a symlink (a sessions folder moved to another disk), never a
   symlinked folder below it (as :meth:`pathlib.Path.rglob` does), and never a folder twice;
3. stops at :data:`MAX_DEPTH` levels and after :data:`MAX_ENTRIES` entries, saying so (each
   folder it does not enter is named), so a root that is really ``/`` costs a bounded walk
   instead of the whole disk; a folder it cannot even stat (a path longer than the system
   allows, a link loop) is :class:`~.refs.Unreadable` too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

from skillopt_sleep.harvest.refs import Unreadable

__all__ = ["MAX_DEPTH", "MAX_ENTRIES", "entries", "files_below", "subfolders"]

MAX_DEPTH = 8  # the deepest layout (Codex's sessions/YYYY/MM/DD) needs 4
MAX_ENTRIES = 100_000  # directory entries looked at by one walk
Listed = list[Path] | Unreadable
_TOO_DEEP = "{} folder(s) in it not entered: the walk goes {} levels deep at most"


def _reason(exc: OSError) -> str:
    return f"cannot list: {exc.strerror or type(exc).__name__}"


def entries(folder: Path) -> Listed:
    """The entries of ``folder``, sorted; empty when it is missing or vanished (or not a
    folder), :class:`Unreadable` when it exists but cannot be listed."""
    try:
        with os.scandir(folder) as listing:
            return sorted(Path(entry.path) for entry in listing)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        return Unreadable(where=str(folder), reason=_reason(exc))


def subfolders(folder: Path) -> Listed:
    """The folders directly in ``folder`` (symlinked ones included), sorted, as :func:`entries`."""
    listed = entries(folder)
    if isinstance(listed, Unreadable):
        return listed
    return [path for path in listed if _is_dir(path)]


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def files_below(
    root: Path,
    suffix: str,
    *,
    skip_folders: Collection[str] = (),
    skip_file: Callable[[str], bool] | None = None,
    max_entries: int = MAX_ENTRIES,
) -> Iterator[Path | Unreadable]:
    """Every regular file named ``*<suffix>`` at or below ``root`` (sorted per folder), and an
    :class:`Unreadable` for each folder that could not be listed or a walk cut short.

    ``skip_folders``: folder names not entered (e.g. ``subagents``); ``skip_file(name)``: file
    names left out. A missing ``root`` yields nothing.
    """
    seen: set[tuple[int, int]] = set()
    budget = max_entries
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            info = folder.stat()
        except FileNotFoundError:
            continue  # vanished, or a dangling root link
        except OSError as exc:  # a path too long for the system, a link loop, no access
            yield Unreadable(where=str(folder), reason=_reason(exc))
            continue
        if (info.st_dev, info.st_ino) in seen:
            continue
        seen.add((info.st_dev, info.st_ino))
        try:
            with os.scandir(folder) as listing:
                found = sorted(listing, key=lambda entry: entry.name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            yield Unreadable(where=str(folder), reason=_reason(exc))
            continue
        budget -= len(found)
        if budget < 0:
            yield Unreadable(
                where=str(root), reason=f"walk stopped after {max_entries} entries (too large?)"
            )
            return
        below: list[tuple[Path, int]] = []
        for entry in found:
            kind = _kind(entry)
            if kind == "folder" and entry.name not in skip_folders:
                below.append((Path(entry.path), depth + 1))
            elif kind == "file" and entry.name.endswith(suffix) and not _skipped(entry, skip_file):
                yield Path(entry.path)
        if below and depth >= MAX_DEPTH:
            yield Unreadable(where=str(folder), reason=_TOO_DEEP.format(len(below), MAX_DEPTH))
            continue
        stack.extend(reversed(below))


def _skipped(entry: os.DirEntry[str], skip_file: Callable[[str], bool] | None) -> bool:
    return skip_file is not None and skip_file(entry.name)


def _kind(entry: os.DirEntry[str]) -> str:
    """``folder`` (a real one, not a link), ``file`` (a regular file, links followed) or ``""``."""
    try:
        if entry.is_dir(follow_symlinks=False):
            return "folder"
        return "file" if entry.is_file() else ""
    except OSError:
        return ""
