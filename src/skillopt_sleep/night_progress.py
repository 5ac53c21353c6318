"""Night progress: the shared live display on a TTY, structured log events otherwise.

The night reports stage starts, planned calls and finished calls through the one progress
protocol of :mod:`skillopt.progress`; on a terminal each finished stage keeps its line
(model calls done/total, cache hits apart, errors), off one :class:`LogProgress` logs a
line per stage and note.
"""

from __future__ import annotations

import sys
from typing import TextIO

from skillopt.backends.base import Completer, Completion, CompletionRequest
from skillopt.errors import BudgetExceededError
from skillopt.logging import get_logger
from skillopt.progress import InFlight, Progress, TtyProgress, terminal_progress
from skillopt.redact import sanitize

__all__ = [
    "LogProgress",
    "NightProgress",
    "ProgressCompleter",
    "TtyProgress",
    "default_progress",
    "find_in_flight",
]

_log = get_logger(__name__)

#: The night's name for the shared protocol.
NightProgress = Progress


class LogProgress:
    """Structured logs: one event per stage and note; calls are summarised per stage."""

    def __init__(self) -> None:
        self.current = ""
        self.done = 0
        self.errors = 0
        self.planned = 0
        self.cache_hits = 0

    def stage(self, name: str) -> None:
        if self.current:
            self._stage_done()
        self.current, self.done, self.errors, self.planned = name, 0, 0, 0
        self.cache_hits = 0
        _log.info("night.stage", stage=name)

    def calls_planned(self, n: int) -> None:
        self.planned += n

    def call_done(self, *, ok: bool = True, stage: str = "", cached: bool = False) -> None:
        if cached:
            self.cache_hits += 1
            return
        self.done += 1
        self.errors += 0 if ok else 1

    def note(self, message: str) -> None:
        _log.info("night.note", stage=self.current, message=sanitize(message))

    def close(self) -> None:
        if self.current:
            self._stage_done()
        self.current = ""

    def _stage_done(self) -> None:
        _log.info("night.stage_done", stage=self.current, calls=self.done,
                  cache_hits=self.cache_hits, errors=self.errors)  # fmt: skip


def default_progress(stream: TextIO | None = None) -> NightProgress:
    """The live display on a terminal (finished stages keep their line), else logs."""
    out = stream or sys.stderr
    live = terminal_progress(out, keep_stage_lines=True, note_prefix="  ")
    return live if live is not None else LogProgress()


def find_in_flight(completer: object) -> InFlight | None:
    """The backend pool's view of its requests in flight, through the wrappers stacked on
    it (each keeps the completer it wraps as ``inner``); None when there is no pool."""
    for _ in range(16):  # a stack is a handful of wrappers deep
        in_flight = getattr(completer, "in_flight", None)
        if callable(in_flight):
            return in_flight  # type: ignore[no-any-return]
        completer = getattr(completer, "inner", None)
        if completer is None:
            return None
    return None


class ProgressCompleter:
    """Counts each finished call on a progress display (a reply the response cache served
    apart, as no model call), for code that reports no progress of its own (the miner)."""

    def __init__(self, inner: Completer, progress: Progress) -> None:
        self.inner = inner
        self.progress = progress

    async def complete(self, request: CompletionRequest) -> Completion:
        try:
            done = await self.inner.complete(request)
        except BudgetExceededError:
            raise  # refused before any call: nothing to count
        except Exception:
            self.progress.call_done(ok=False)
            raise
        if done.cached:
            self.progress.call_done(ok=True, cached=True)
        else:
            self.progress.call_done(ok=True)
        return done
