"""Training progress for a terminal: one redrawn status line plus a permanent line per step.

The trainer reports phases (baseline, step k/N, epoch end, final) and each finished model call;
:class:`TtyProgress` shows the phase, calls done in it by stage and the elapsed time, redrawn on
those events only (at most every 0.1 s). Off a TTY the structured logs are the progress record,
so :func:`default_progress` returns ``None`` there.
"""

from __future__ import annotations

import sys
import time
from typing import Protocol, TextIO

from skillopt.redact import sanitize


class TrainProgress(Protocol):
    def phase(self, label: str) -> None: ...

    def call_done(self, stage: str) -> None: ...

    def line(self, message: str) -> None: ...

    def close(self) -> None: ...


class TtyProgress:
    """Draws ``[label] calls N (stage a, stage b) 12s`` on one line of ``stream``."""

    def __init__(self, stream: TextIO | None = None, *, min_interval: float = 0.1) -> None:
        self.out = stream or sys.stderr
        self.label = ""
        self.calls: dict[str, int] = {}
        self.started = time.monotonic()
        self._min_interval = min_interval
        self._last_draw = 0.0
        self._drawn = False

    def phase(self, label: str) -> None:
        self.label, self.calls, self.started = label, {}, time.monotonic()
        self._draw(force=True)

    def call_done(self, stage: str) -> None:
        self.calls[stage] = self.calls.get(stage, 0) + 1
        self._draw()

    def line(self, message: str) -> None:
        """A permanent line (a step's outcome) above the status line."""
        self._clear()
        self.out.write(sanitize(message) + "\n")
        self.out.flush()
        self._draw(force=True)

    def close(self) -> None:
        self._clear()
        self.label = ""

    def _clear(self) -> None:
        if self._drawn:
            self.out.write("\r\x1b[2K")
            self._drawn = False

    def _draw(self, *, force: bool = False) -> None:
        if not self.label:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < self._min_interval:
            return
        self._last_draw = now
        total = sum(self.calls.values())
        stages = ", ".join(f"{name} {n}" for name, n in sorted(self.calls.items()))
        detail = f" ({stages})" if stages else ""
        text = f"[{self.label}] calls {total}{detail}  {now - self.started:.0f}s"
        self.out.write("\r\x1b[2K" + text)
        self.out.flush()
        self._drawn = True


def default_progress(stream: TextIO | None = None) -> TtyProgress | None:
    """A live display when ``stream`` (stderr by default) is a terminal, else ``None``."""
    out = stream or sys.stderr
    return TtyProgress(out) if out.isatty() else None
