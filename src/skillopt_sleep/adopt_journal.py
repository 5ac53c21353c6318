"""An adoption's write-ahead journal, its file operations, and finishing an interrupted one.

:func:`skillopt_sleep.adopt.adopt` writes ``<run_dir>/.adopt-journal.json`` before it
touches any live file: per target, the receipt it will get, the original bytes and the
folders it will create. Appending the receipts and then deleting the journal is the
commit point. A journal found later means a process died in between;
:func:`recover_locked` finishes that adoption one way or the other:

* **completed** when every target already holds its new bytes (only the receipts were
  missing) or the receipts were written (only the journal was left behind): missing
  receipts are appended;
* **rolled back** otherwise: every target still holding its new bytes gets its original
  back (one changed since is left alone, and named), and the folders created are removed.

Either way the transaction's temp files (``.tmp-adopt-<transaction>-*`` beside each
target) are removed, and so is the journal, which holds copies of the user's files.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Self

from skillopt.atomicio import (
    TEMP_PREFIX,
    append_jsonl,
    atomic_write_bytes,
    atomic_write_json,
)
from skillopt.errors import CorruptStateError, LockHeldError, RefusedError
from skillopt.logging import get_logger
from skillopt_sleep.lock import FileLock
from skillopt_sleep.staging import RECEIPTS_NAME, sha256_bytes, sha256_file

__all__ = [
    "BACKUP_DIR",
    "JOURNAL_NAME",
    "LOCK_NAME",
    "AdoptedFile",
    "JournalTarget",
    "Recovery",
    "RecoveryAction",
    "ReplaceFn",
    "RunLock",
    "commit",
    "make_dirs",
    "read_backup",
    "receipts",
    "recover_locked",
    "remove_dirs",
    "restore",
    "write_file",
    "write_journal",
]

JOURNAL_NAME = ".adopt-journal.json"
LOCK_NAME = ".adopt.lock"
BACKUP_DIR = "adopt-backups"
_RECEIPT_TEXT_FIELDS = ("name", "kind", "sha256_before", "backup_path", "adopted_at")
_MOVE_ASIDE = (
    "lines of {path} that are not adoption receipts were skipped; if the file is damaged, "
    "move it aside (e.g. rename it to adoptions.jsonl.bad): only the night's `adopt` writes it"
)

ReplaceFn = Callable[[str, str], None]
_log = get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class AdoptedFile:
    name: str
    kind: str
    live_path: str
    sha256_before: str  # "" = the live file did not exist
    sha256_after: str
    backup_path: str  # "" when there was nothing to back up

    def to_dict(self) -> dict[str, str]:
        return {
            "name": self.name,
            "kind": self.kind,
            "live_path": self.live_path,
            "sha256_before": self.sha256_before,
            "sha256_after": self.sha256_after,
            "backup_path": self.backup_path,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalTarget:
    """One live file an adoption replaces, with what it takes to undo it."""

    adopted: AdoptedFile
    original: bytes | None  # None = the live file did not exist
    new_dirs: tuple[Path, ...] = ()  # folders created for it, top first


class RecoveryAction(StrEnum):
    COMPLETED = "completed"
    ROLLED_BACK = "rolled_back"


@dataclass(frozen=True, slots=True, kw_only=True)
class Recovery:
    """What finishing an interrupted adoption did, in words a user can act on."""

    run_dir: Path
    transaction: str
    action: RecoveryAction
    files: tuple[str, ...]  # completed: the files adopted; rolled back: the files restored
    left_alone: tuple[str, ...] = ()  # changed since the interruption: not touched

    def describe(self) -> str:
        where = f"an interrupted adoption of night {self.run_dir.name}"
        if self.action is RecoveryAction.COMPLETED:
            return f"{where} was completed: {', '.join(self.files)} (receipts recorded)"
        restored = f"restored {', '.join(self.files)}" if self.files else "nothing was replaced"
        text = f"{where} was rolled back ({restored}); run `skillopt-sleep adopt` to retry"
        if self.left_alone:
            text += f"; changed since, left as they are: {', '.join(self.left_alone)}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "transaction": self.transaction,
            "action": self.action.value,
            "files": list(self.files),
            "left_alone": list(self.left_alone),
            "message": self.describe(),
        }


# --------------------------------------------------------------------------- lock


class RunLock(FileLock):
    """The adoption lock of one run, ``<run_dir>/.adopt.lock``: a :class:`FileLock`, so the
    kernel drops it when the holder dies and a killed adoption never leaves a lock that
    needs clearing by hand."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(run_dir / LOCK_NAME, command="adopt")

    def acquire(self) -> Self:
        try:
            return super().acquire()
        except LockHeldError as exc:
            raise LockHeldError(
                f"{self.path}: another adoption of this night is running", holder=exc.holder
            ) from None


# --------------------------------------------------------------------------- files


def _temp_prefix(transaction: str) -> str:
    return f"{TEMP_PREFIX}adopt-{transaction[:12]}-"


def write_file(path: Path, data: bytes, replace_fn: ReplaceFn, transaction: str) -> None:
    """The atomic writer, its temp file named after the transaction (so a recovery can find
    it if we are killed), the live file's permissions kept, ``replace_fn`` as the rename."""
    atomic_write_bytes(
        path, data, mode=None, temp_prefix=_temp_prefix(transaction), replace=replace_fn
    )


def restore(path: Path, original: bytes | None, transaction: str) -> None:
    if original is None:
        path.unlink(missing_ok=True)
    else:
        write_file(path, original, os.replace, transaction)


def make_dirs(folders: Sequence[Path]) -> list[Path]:
    """Create ``folders`` (top first) one level at a time; returns those created here.

    ``mkdir`` never follows a symlink at the new name, and each new level is checked to be
    a real directory before the next is made inside it.
    """
    created: list[Path] = []
    for folder in folders:
        try:
            os.mkdir(folder, 0o755)
            created.append(folder)
        except FileExistsError:
            pass
        if os.path.islink(folder) or os.path.realpath(folder) != str(folder):
            raise RefusedError(f"{folder} turned into a symlink while adopting; refusing")
    return created


def remove_dirs(folders: Sequence[Path]) -> None:
    """Undo :func:`make_dirs`: remove the folders (deepest first) that are still empty."""
    for folder in reversed(folders):
        with contextlib.suppress(OSError):
            folder.rmdir()


def _remove_temps(targets: Sequence[JournalTarget], transaction: str) -> None:
    folders = {Path(t.adopted.live_path).parent for t in targets}
    for folder in folders:
        for stray in folder.glob(f"{_temp_prefix(transaction)}*"):
            stray.unlink(missing_ok=True)


# --------------------------------------------------------------------------- journal


def _is_receipt(record: object) -> bool:
    """A line ``commit`` could have written: an object naming its live file and new hash."""
    return (
        isinstance(record, dict)
        and isinstance(record.get("live_path"), str)
        and isinstance(record.get("sha256_after"), str)
        and all(isinstance(record.get(k, ""), str) for k in _RECEIPT_TEXT_FIELDS)
    )


_WARNED: set[tuple[str, str]] = set()  # (file, digest) already named in this process


def _first_warning(path: Path, raw: bytes) -> bool:
    """Whether this damage was not named yet: status reads one file several times."""
    key = (str(path), sha256_bytes(raw))
    if key in _WARNED:
        return False
    _WARNED.add(key)
    return True


def receipts(run_dir: Path) -> list[dict[str, Any]]:
    """The adoption receipts of ``run_dir``; a line that is not one is skipped and named in
    a warning (with what to do), so one damaged file never stops ``status`` or a night."""
    path = run_dir / RECEIPTS_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        _log.warning("adopt.receipts_unreadable", path=str(path), error=str(exc),
                     hint=_MOVE_ASIDE.format(path=path))  # fmt: skip
        return []
    found: list[dict[str, Any]] = []
    bad: list[int] = []
    for number, line in enumerate(raw.split(b"\n")[:-1], start=1):  # the tail is torn
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if _is_receipt(record):
            found.append(record)
        else:
            bad.append(number)
    if bad and _first_warning(path, raw):
        _log.warning("adopt.receipts_damaged", path=str(path), bad_lines=bad[:10],
                     bad_count=len(bad), hint=_MOVE_ASIDE.format(path=path))  # fmt: skip
    return found


def read_backup(folder: Path, receipt: Mapping[str, Any]) -> bytes | None:
    """The bytes a receipt's adoption replaced, only when its backup is one ``adopt`` wrote:
    a file in ``<folder>/adopt-backups/`` (no link out of it) holding ``sha256_before``.
    ``None`` otherwise: a receipt is a file on disk, not a licence to read any path."""
    named = str(receipt.get("backup_path") or "")
    expected = str(receipt.get("sha256_before") or "")
    if not named or not expected:
        return None
    home = os.path.realpath(folder / BACKUP_DIR)
    path = os.path.realpath(named)
    if os.path.dirname(path) != home:
        _log.warning("adopt.backup_refused", path=named, reason="outside the run's backups",
                     receipts=str(folder / RECEIPTS_NAME))  # fmt: skip
        return None
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    if sha256_bytes(data) != expected:
        _log.warning("adopt.backup_refused", path=named, reason="hash does not match the receipt",
                     receipts=str(folder / RECEIPTS_NAME))  # fmt: skip
        return None
    return data


def write_journal(root: Path, transaction: str, targets: Sequence[JournalTarget]) -> None:
    items = [
        {
            **t.adopted.to_dict(),
            "original_b64": None
            if t.original is None
            else base64.b64encode(t.original).decode("ascii"),
            "new_dirs": [str(d) for d in t.new_dirs],
        }
        for t in targets
    ]
    atomic_write_json(root / JOURNAL_NAME, {"transaction": transaction, "targets": items})


def commit(
    root: Path, transaction: str, adopted: Sequence[AdoptedFile], now: datetime | None = None
) -> None:
    """Append the receipts (one write), then delete the journal: the commit point."""
    stamp = (now or datetime.now(UTC)).astimezone(UTC).isoformat()
    append_jsonl(
        root / RECEIPTS_NAME,
        [{"transaction": transaction, "adopted_at": stamp, **a.to_dict()} for a in adopted],
    )
    (root / JOURNAL_NAME).unlink(missing_ok=True)


def _read_journal(path: Path) -> tuple[str, list[JournalTarget]] | None:
    try:
        journal = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CorruptStateError(str(path), f"unreadable journal ({exc})") from exc
    try:
        targets = []
        for item in journal["targets"]:
            original = item.get("original_b64")
            targets.append(
                JournalTarget(
                    adopted=AdoptedFile(
                        name=str(item.get("name", "")),
                        kind=str(item.get("kind", "")),
                        live_path=str(item["live_path"]),
                        sha256_before=str(item.get("sha256_before", "")),
                        sha256_after=str(item["sha256_after"]),
                        backup_path=str(item.get("backup_path", "")),
                    ),
                    original=None if original is None else base64.b64decode(original),
                    new_dirs=tuple(Path(d) for d in item.get("new_dirs", [])),
                )
            )
        return str(journal["transaction"]), targets
    except (KeyError, TypeError, AttributeError, binascii.Error) as exc:
        raise CorruptStateError(str(path), f"invalid journal ({exc!r})") from exc


def recover_locked(root: Path, now: datetime | None = None) -> Recovery | None:
    """Finish an interrupted adoption of ``root`` (the caller holds its :class:`RunLock`)."""
    journal_path = root / JOURNAL_NAME
    read = _read_journal(journal_path)
    if read is None:
        return None
    transaction, targets = read
    _remove_temps(targets, transaction)
    committed = transaction in {r.get("transaction") for r in receipts(root)}
    replaced = all(sha256_file(t.adopted.live_path) == t.adopted.sha256_after for t in targets)
    complete = all(t.adopted.name and t.adopted.kind for t in targets)  # an older journal: no
    if committed or (replaced and complete):
        if not committed:
            commit(root, transaction, [t.adopted for t in targets], now)
        journal_path.unlink(missing_ok=True)
        recovery = Recovery(
            run_dir=root,
            transaction=transaction,
            action=RecoveryAction.COMPLETED,
            files=tuple(t.adopted.live_path for t in targets),
        )
    else:
        restored: list[str] = []
        left_alone: list[str] = []
        for target in targets:
            path = Path(target.adopted.live_path)
            current = sha256_file(path)
            before = "" if target.original is None else sha256_bytes(target.original)
            if current == target.adopted.sha256_after:
                restore(path, target.original, transaction)
                restored.append(str(path))
            elif current != before:
                left_alone.append(str(path))
            remove_dirs(target.new_dirs)
        journal_path.unlink(missing_ok=True)
        recovery = Recovery(
            run_dir=root,
            transaction=transaction,
            action=RecoveryAction.ROLLED_BACK,
            files=tuple(restored),
            left_alone=tuple(left_alone),
        )
    _log.warning("adopt.recovered", **recovery.to_dict())
    return recovery
