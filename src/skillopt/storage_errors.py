"""Which failures of the file system are the user's to fix (a full disk, a read-only or
foreign folder) rather than a bug, and how to say so: :func:`storage_error`.

An ``OSError`` from a write names no path when the write itself failed (``ENOSPC`` from
``write``), so the writers that matter (:mod:`skillopt.atomicio`) attach it first.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Iterator

from skillopt.errors import StorageError

__all__ = ["storage_error", "storage_failures"]

_WRITE_FAILURES = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large (disk full, or a file-size limit)",
    errno.EROFS: "read-only file system",
}
_ACCESS_FAILURES = {
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOTDIR: "not a directory (a file stands where a folder should be)",
}


def storage_error(exc: BaseException) -> StorageError | None:
    """``exc`` as the user's problem to fix, or ``None`` when it is not one of those."""
    if not isinstance(exc, OSError) or exc.errno is None:
        return None
    path = str(exc.filename) if exc.filename is not None else "the state directory"
    if exc.errno in _WRITE_FAILURES:
        return StorageError(_WRITE_FAILURES[exc.errno], path)
    if exc.errno in _ACCESS_FAILURES:
        return StorageError(_ACCESS_FAILURES[exc.errno], path, writing=False)
    return None


def storage_failures(exc: BaseException) -> StorageError | None:
    """The first storage failure in ``exc`` or, for an exception group (a task group's),
    among its leaves; ``None`` when there is none or a leaf is something else (a bug, which
    keeps its traceback). Cancellations beside the failure are what it caused, not causes."""
    if not isinstance(exc, BaseExceptionGroup):
        return storage_error(exc)
    found: StorageError | None = None
    for leaf in _leaves(exc):
        if _is_cancellation(leaf):
            continue
        mapped = storage_error(leaf)
        if mapped is None:
            return None
        found = found or mapped
    return found


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


def _is_cancellation(exc: BaseException) -> bool:
    return isinstance(exc, asyncio.CancelledError | KeyboardInterrupt)  # anyio runs on asyncio
