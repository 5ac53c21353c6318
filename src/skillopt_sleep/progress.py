"""Night progress: a one-line live display on a TTY, structured log events otherwise.

The night reports stage starts, planned calls and finished calls; the display shows the
stage, calls done/total, errors and an ETA from the observed call rate. It redraws on
events only (no timer), at most every 0.1 s.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Protocol, TextIO

from skillopt.logging import get_logger
from skillopt.redact import sanitize


def _log() -> Any:
    """Looked up per call, so the logging config set by the CLI applies."""
    return get_logger("skillopt_sleep.night")


class NightProgress(Protocol):
    def stage(self, name: str) -> None: ...

    def calls_planned(self, n: int) -> None: ...

    def call_done(self, *, ok: bool) -> None: ...

    def note(self, message: str) -> None: ...

    def close(self) -> None: ...


class LogProgress:
    """Structured logs: one event per stage and note; calls are summarised per stage."""

    def __init__(self) -> None:
        self.current = ""
        self.done = 0
        self.errors = 0
        self.planned = 0

    def stage(self, name: str) -> None:
        if self.current:
            _log().info(
                "night.stage_done",
                stage=self.current,
                calls=self.done,
                errors=self.errors,
            )
        self.current, self.done, self.errors, self.planned = name, 0, 0, 0
        _log().info("night.stage", stage=name)

    def calls_planned(self, n: int) -> None:
        self.planned += n

    def call_done(self, *, ok: bool) -> None:
        self.done += 1
        self.errors += 0 if ok else 1

    def note(self, message: str) -> None:
        _log().info("night.note", stage=self.current, message=sanitize(message))

    def close(self) -> None:
        if self.current:
            _log().info("night.stage_done", stage=self.current, calls=self.done, errors=self.errors)
        self.current = ""


class TtyProgress:
    """A single redrawn status line plus permanent lines for notes."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.out = stream or sys.stderr
        self.current = ""
        self.done = 0
        self.errors = 0
        self.planned = 0
        self.started = time.monotonic()
        self._last_draw = 0.0

    def stage(self, name: str) -> None:
        self._finish_line()
        self.current, self.done, self.errors, self.planned = name, 0, 0, 0
        self.started = time.monotonic()
        self._draw(force=True)

    def calls_planned(self, n: int) -> None:
        self.planned += n
        self._draw()

    def call_done(self, *, ok: bool) -> None:
        self.done += 1
        self.errors += 0 if ok else 1
        self._draw()

    def note(self, message: str) -> None:
        self._finish_line()
        self.out.write(f"  {sanitize(message)}\n")
        self.out.flush()

    def close(self) -> None:
        self._finish_line()
        self.current = ""

    def _finish_line(self) -> None:
        if self.current:
            self._draw(force=True)
            self.out.write("\n")
            self.out.flush()

    def _draw(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_draw < 0.1:
            return
        self._last_draw = now
        elapsed = now - self.started
        eta = ""
        if self.done and self.planned > self.done:
            eta = f"  eta {elapsed / self.done * (self.planned - self.done):.0f}s"
        total = f"/{self.planned}" if self.planned else ""
        errs = f"  errors {self.errors}" if self.errors else ""
        line = f"[{self.current}] calls {self.done}{total}{errs}{eta}"
        self.out.write("\r\x1b[2K" + line)
        self.out.flush()


def default_progress(stream: TextIO | None = None) -> NightProgress:
    out = stream or sys.stderr
    return TtyProgress(out) if out.isatty() else LogProgress()
