"""Atomic file writes: temp file in the same directory, fsync, rename, fsync the directory.

A reader never sees a half-written file, and a killed process leaves at worst a stray
``.tmp-*`` file (ignored by readers, swept by :func:`sweep_temp_files`). Every whole-file
write that matters goes through :func:`atomic_write_bytes` (replace) or
:func:`atomic_create_bytes` (create, never replace); nothing else renames a temp file.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

__all__ = [
    "TEMP_PREFIX",
    "AppendJournal",
    "append_jsonl",
    "atomic_create_bytes",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "dumps_json",
    "dumps_json_list",
    "read_json_object",
    "read_jsonl",
    "sweep_temp_files",
]

TEMP_PREFIX = ".tmp-"


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """Inside, an ``OSError`` that names no file (a failed ``write`` or ``fsync``: a full
    disk) names ``path``, so the user is told which file could not be written."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        raise type(exc)(exc.errno, exc.strerror or "", str(path)) from exc


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make the renames and creations in ``directory`` durable (for writers that pass
    ``sync_dir=False`` and group these fsyncs by time)."""
    _fsync_dir(Path(directory))


def _durable_temp(target: Path, data: bytes, mode: int, prefix: str) -> str:
    """A temp file beside ``target`` holding ``data``, fsynced, with ``mode``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix, dir=target.parent)
    try:
        with _naming(target), os.fdopen(fd, "wb") as handle:  # a failed write names no file
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def _mode_of(target: Path, default: int) -> int:
    try:
        return os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        return default


def atomic_write_bytes(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    mode: int | None = 0o644,
    sync_dir: bool = True,
    temp_prefix: str = TEMP_PREFIX,
    replace: Callable[[str, str], None] | None = None,
) -> None:
    """Write ``data`` to ``path`` atomically. ``sync_dir=False`` leaves the directory's
    fsync to the caller: after a power cut the file holds either the old or the new
    content (never a mix); without it the rename itself may be the part that is lost.

    ``mode=None`` keeps the permission bits of the file being replaced (0o644 for a new
    one). ``temp_prefix`` names the temp file so a recovery can find its own strays;
    ``replace`` is the rename, ``os.replace`` unless a caller that must observe or fail it
    passes its own."""
    target = Path(path)
    chosen = _mode_of(target, 0o644) if mode is None else mode
    tmp = _durable_temp(target, data, chosen, temp_prefix)
    try:
        (replace or os.replace)(tmp, str(target))
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    if sync_dir:
        _fsync_dir(target.parent)


def atomic_create_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> bool:
    """Create ``path`` holding ``data`` unless it already exists (never replaced): the
    file appears whole or not at all. True if this call created it."""
    target = Path(path)
    tmp = _durable_temp(target, data, mode, TEMP_PREFIX)
    try:
        os.link(tmp, target)
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    _fsync_dir(target.parent)
    return True


def atomic_write_text(
    path: str | os.PathLike[str], text: str, *, mode: int = 0o644, sync_dir: bool = True
) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode, sync_dir=sync_dir)


def dumps_json(data: Any) -> str:
    """Stable JSON: sorted keys, 2-space indent, non-finite numbers rejected."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def dumps_json_list(item_texts: Iterable[str]) -> str:
    """What :func:`dumps_json` gives for a list, built from what it gave for each item: a
    document that repeats items already written (a history rewritten after every step)
    serializes each of them once. JSON text holds no raw newline, so indenting an item is
    putting two spaces after each of its line breaks."""
    items = ["  " + text.removesuffix("\n").replace("\n", "\n  ") for text in item_texts]
    return "[\n" + ",\n".join(items) + "\n]\n" if items else "[]\n"


def atomic_write_json(path: str | os.PathLike[str], data: Any, *, sync_dir: bool = True) -> None:
    atomic_write_text(path, dumps_json(data), sync_dir=sync_dir)


def append_jsonl(path: str | os.PathLike[str], records: list[Any]) -> None:
    """Append complete lines in one write, then fsync; readers skip a torn last line.

    A torn tail left by a killed writer is cut off first: appended after it, it would
    become a corrupt line in the middle of the file and make the whole file unreadable.
    """
    if not records:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = "".join(
        json.dumps(r, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n" for r in records
    ).encode("utf-8")
    with _naming(target), open(target, "a+b") as handle:
        _cut_torn_tail(handle)
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())


class AppendJournal:
    """An append-only JSONL file that takes each result as it lands.

    Every :meth:`append` is one write of complete lines, handed to the kernel at once, so a
    killed process loses nothing it appended. The fsync, which only a power cut or an OS
    crash needs, is batched by time: at most one per ``sync_every`` seconds, plus one on
    :meth:`sync`. A torn tail a killed writer left is cut off before the first append.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sync_every: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.sync_every = sync_every
        self._clock = clock
        self._synced_at = clock()
        self._dirty = False
        self._checked = False

    def append(self, records: list[Any]) -> None:
        if not records:
            return
        payload = "".join(
            json.dumps(r, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
            for r in records
        ).encode("utf-8")
        if not self._checked:  # the first append makes the directory and checks the tail
            self.path.parent.mkdir(parents=True, exist_ok=True)
        with _naming(self.path), open(self.path, "a+b") as handle:
            if not self._checked:
                _cut_torn_tail(handle)
                self._checked = True
            handle.write(payload)
            handle.flush()
            self._dirty = True
            if self._clock() - self._synced_at >= self.sync_every:
                self._fsync(handle.fileno())

    @property
    def unsynced(self) -> bool:
        """Lines were appended since the last fsync."""
        return self._dirty

    def sync(self) -> None:
        """Make every appended line durable now (a stage boundary, the end of a night)."""
        if not self._dirty:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            self._fsync(fd)
        finally:
            os.close(fd)

    def _fsync(self, fd: int) -> None:
        os.fsync(fd)
        self._synced_at = self._clock()
        self._dirty = False


def _cut_torn_tail(handle: BinaryIO) -> None:
    """Truncate the file of an ``a+b`` handle back to just after its last newline."""
    size = handle.seek(0, os.SEEK_END)
    if size == 0:
        return
    handle.seek(size - 1)
    if handle.read(1) == b"\n":
        return
    pos = size
    while pos > 0:
        step = min(pos, 65536)
        handle.seek(pos - step)
        newline = handle.read(step).rfind(b"\n")
        if newline >= 0:
            pos = pos - step + newline + 1
            break
        pos -= step
    handle.truncate(pos)


def read_json_object(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A JSON object from disk; ``{}`` when it is missing, unreadable or not an object (a
    record a reader can do without: a page, a status line, a look at earlier nights)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_jsonl(path: str | os.PathLike[str]) -> list[Any]:
    """Read a JSONL file, dropping a torn (unterminated or unparsable) final line."""
    target = Path(path)
    if not target.exists():
        return []
    out: list[Any] = []
    raw = target.read_bytes()
    lines = raw.split(b"\n")
    complete = lines[:-1]  # the piece after the last newline is torn or empty
    for line in complete:
        if not line.strip():
            continue
        out.append(json.loads(line))
    return out


def sweep_temp_files(directory: str | os.PathLike[str]) -> int:
    """Remove stray temp files a killed writer left behind; returns how many."""
    count = 0
    root = Path(directory)
    if not root.is_dir():
        return 0
    for stray in root.rglob(f"{TEMP_PREFIX}*"):
        try:
            stray.unlink()
            count += 1
        except OSError:
            pass
    return count
