"""Run one CLI subprocess: argv list, own process tree, hard timeout, bounded output.

The child starts as the root of its own tree (:mod:`.proctree`: a session of its own
on POSIX, a new process group on Windows) so that a timeout, a cancellation, an output
overflow or an early failure seen on stdout stops the *whole* tree (node wrappers, native
binaries, anything they spawned, and on Linux a helper that left the group with ``setsid``),
never just the top process: asked to stop, then killed after a short grace. On POSIX the
tree is also swept after a normal exit so no straggler keeps the pipes open.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc

from skillopt.backends.cli.proctree import (
    STOP_GRACE_S,
    TREE_ENV,
    group_alive,
    kill_tree,
    new_mark,
    spawn_options,
    terminate_tree,
)
from skillopt.errors import (
    BackendError,
    BackendRequestError,
    BackendTimeoutError,
    ReplyTooLargeError,
)
from skillopt.redact import sanitize

__all__ = ["LineWatcher", "ProcessResult", "run_process", "tail"]

LineWatcher = Callable[[str], BackendError | None]
"""Called with each complete stdout line; returning an error stops the process at once."""

_TAIL = 2000  # characters of output kept in error causes


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessResult:
    returncode: int
    stdout: str
    stderr: str
    elapsed: float
    truncated: bool = False


class _Capture:
    """Accumulates one stream up to ``limit`` bytes; reports overflow instead of growing."""

    def __init__(self, limit: int, watcher: LineWatcher | None = None) -> None:
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.overflow = False
        self._watcher = watcher
        self._pending = b""

    def add(self, chunk: bytes) -> BackendError | None:
        self.size += len(chunk)
        if self.size > self.limit:
            self.overflow = True
            return None
        self.chunks.append(chunk)
        if self._watcher is None:
            return None
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            err = self._watcher(line.decode("utf-8", "replace"))
            if err is not None:
                return err
        return None

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", "replace")


def _kill_tree(proc: anyio.abc.Process, mark: str) -> None:
    kill_tree(proc.pid, exited=proc.returncode is not None, mark=mark)


async def _stop_tree(proc: anyio.abc.Process, mark: str) -> None:
    """Stop a tree still at work: asked first, killed after :data:`STOP_GRACE_S` (see
    :mod:`.proctree`: a killed agent CLI leaves its sandbox's litter behind). The grace is
    the whole tree's: a wrapper that exits at once must not cut short the cleanup of the
    native process under it."""
    if terminate_tree(proc.pid, mark=mark):
        with anyio.move_on_after(STOP_GRACE_S):
            await proc.wait()
            while group_alive(proc.pid, mark=mark):  # noqa: ASYNC110 - a group has no event
                await anyio.sleep(0.05)
    _kill_tree(proc, mark)
    await proc.wait()


def tail(text: str, limit: int = _TAIL) -> str:
    """The redacted, control-stripped end of ``text`` (where CLIs put their errors)."""
    clean = sanitize(text.strip())
    return clean if len(clean) <= limit else "…" + clean[-limit:]


async def _start(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], stdin: bool, member: str,
    mark: str,
) -> anyio.abc.Process:  # fmt: skip
    """``argv`` started as the root of its own process tree (the tree is what gets killed),
    its environment holding ``mark`` (:data:`.proctree.TREE_ENV`)."""
    try:
        return await anyio.open_process(
            list(argv),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env={**env, TREE_ENV: mark},
            **spawn_options(),
        )
    except OSError as exc:
        raise BackendRequestError(
            f"cannot start {argv[0]}", member=member, cause=sanitize(str(exc))
        ) from exc


async def _feed(stream: anyio.abc.ByteSendStream, text: str) -> None:
    try:
        await stream.send(text.encode("utf-8"))
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass  # the child closed stdin early; its exit code tells the rest
    finally:
        await stream.aclose()


async def _drain(
    stream: anyio.abc.ByteReceiveStream,
    sink: _Capture,
    scope: anyio.CancelScope,
    stop: list[BackendError],
) -> None:
    """Read ``stream`` into ``sink``; a flagged line or an overflow cancels ``scope``."""
    try:
        async for chunk in stream:
            flagged = sink.add(chunk)
            if flagged is not None or sink.overflow:
                if flagged is not None:
                    stop.append(flagged)
                scope.cancel()
                return
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        return


async def _communicate(
    proc: anyio.abc.Process,
    stdin_text: str | None,
    streams: tuple[_Capture, _Capture],
    stop: list[BackendError],
    time_limit: float,
    mark: str,
) -> bool:
    """Feed stdin, read both streams and wait for the exit, within ``time_limit``; the
    process group is dead when this returns or raises. Returns whether time ran out."""
    out, err = streams
    try:
        with anyio.move_on_after(time_limit) as deadline:
            async with anyio.create_task_group() as tg:
                if proc.stdin is not None:
                    tg.start_soon(_feed, proc.stdin, stdin_text or "")
                assert proc.stdout is not None and proc.stderr is not None
                tg.start_soon(_drain, proc.stdout, out, tg.cancel_scope, stop)
                tg.start_soon(_drain, proc.stderr, err, tg.cancel_scope, stop)
                await proc.wait()
                _kill_tree(proc, mark)  # stragglers would hold the pipes open
        return deadline.cancelled_caught
    finally:
        with anyio.CancelScope(shield=True):
            if proc.returncode is None:
                await _stop_tree(proc, mark)
            _kill_tree(proc, mark)
            await proc.aclose()


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    time_limit: float,
    stdin_text: str | None = None,
    max_output_bytes: int = 4 * 1024 * 1024,
    stdout_watcher: LineWatcher | None = None,
    member: str = "",
) -> ProcessResult:
    """Run ``argv`` to completion and return its exit code and (bounded) output.

    Raises :class:`BackendTimeoutError` after ``time_limit`` seconds,
    :class:`ReplyTooLargeError` (class ``too_large``; the process is killed, reading stops)
    when a stream exceeds ``max_output_bytes``, whatever ``stdout_watcher`` returns when it
    flags a line, and :class:`BackendRequestError` when the executable cannot be started. In
    every case, and on cancellation, the process group is killed before this returns.
    """
    started = time.monotonic()
    mark = new_mark()
    proc = await _start(argv, cwd=cwd, env=env, stdin=stdin_text is not None, member=member,
                        mark=mark)  # fmt: skip
    out = _Capture(max_output_bytes, stdout_watcher)
    err = _Capture(max_output_bytes)
    stop: list[BackendError] = []
    timed_out = await _communicate(proc, stdin_text, (out, err), stop, time_limit, mark)

    elapsed = time.monotonic() - started
    if stop:
        raise stop[0]
    if out.overflow or err.overflow:
        raise ReplyTooLargeError(max_output_bytes, seen=max(out.size, err.size), member=member)
    if timed_out:
        raise BackendTimeoutError(
            f"{Path(argv[0]).name} timed out after {time_limit:g}s",
            member=member,
            cause=tail(out.text() + "\n" + err.text()) or f"no output within {time_limit:g}s",
        )
    assert proc.returncode is not None
    return ProcessResult(
        returncode=proc.returncode, stdout=out.text(), stderr=err.text(), elapsed=elapsed
    )
