"""Progress of a run (a night, a training run) on a terminal: one protocol, one display.

A run reports stage starts, planned calls, finished calls (with their accounting stage)
and notes. :class:`TtyProgress` shows ``[stage] calls done/planned (by stage) cache hits
errors eta elapsed`` on one line of a terminal (a reply the response cache served is no
model call: it is counted apart and leaves the plan), redrawn on those events (at most
every ``min_interval`` seconds), with notes as permanent lines above it. A slow call must
not look like a hung one: :func:`keep_ticking` redraws the line once a second while
nothing else does, and then it adds what is in flight (:meth:`TtyProgress.watch`): the
calls out, seconds since the last answer, and the member the oldest call waits on.
Off a terminal the structured logs are the record: :func:`terminal_progress` returns ``None`` there.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Protocol, TextIO

import anyio

from skillopt.logging import keep_line, release_line
from skillopt.redact import sanitize

__all__ = ["InFlight", "Progress", "TtyProgress", "keep_ticking", "terminal_progress"]

#: Requests out now, the member the oldest waits on, and for how many seconds.
InFlight = Callable[[], tuple[int, str, float]]
_TICK = 1.0  # seconds between redraws while no event redraws the line


class Progress(Protocol):
    def stage(self, name: str) -> None: ...

    def calls_planned(self, n: int) -> None: ...

    def call_done(self, *, ok: bool = True, stage: str = "", cached: bool = False) -> None:
        """A planned call finished; ``cached``: the response cache answered it (no model call)."""
        ...

    def note(self, message: str) -> None: ...

    def close(self) -> None: ...


class TtyProgress:
    """A single redrawn status line plus permanent lines for notes.

    ``keep_stage_lines`` leaves each finished stage's last status as a line of its own (the
    night's record of its stages); otherwise the next stage replaces it (a training run's
    steps report themselves in notes). ``note_prefix`` indents notes."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        min_interval: float = 0.1,
        keep_stage_lines: bool = False,
        note_prefix: str = "",
    ) -> None:
        self.out = stream or sys.stderr
        self.current = ""
        self.done = 0
        self.errors = 0
        self.planned = 0
        self.cache_hits = 0
        self.by_stage: dict[str, int] = {}
        self.started = time.monotonic()
        self._min_interval = min_interval
        self._keep = keep_stage_lines
        self._note_prefix = note_prefix
        self._last_draw = 0.0
        self._drawn = False
        self.last_answer = time.monotonic()
        self._in_flight: InFlight | None = None
        keep_line(self.out, self._above)  # a log line comes above the status line, not on it

    def stage(self, name: str) -> None:
        keep_line(self.out, self._above)
        self._end_line()
        self.current, self.done, self.errors, self.planned = name, 0, 0, 0
        self.cache_hits = 0
        self.by_stage = {}
        self.started = time.monotonic()
        self._draw(force=True)

    def calls_planned(self, n: int) -> None:
        self.planned += n
        self._draw()

    def watch(self, in_flight: InFlight) -> None:
        """Where the ticking line reads the calls in flight (the backend pool's)."""
        self._in_flight = in_flight

    def tick(self) -> None:
        """Redraw the line if nothing did for a second (elapsed and waiting times move)."""
        if time.monotonic() - self._last_draw >= _TICK:
            self._draw(force=True)

    def call_done(self, *, ok: bool = True, stage: str = "", cached: bool = False) -> None:
        if cached:
            self.cache_hits += 1
            self.planned = max(0, self.planned - 1)
            self._draw()
            return
        self.done += 1
        self.errors += 0 if ok else 1
        self.last_answer = time.monotonic()
        if stage:
            self.by_stage[stage] = self.by_stage.get(stage, 0) + 1
        self._draw()

    def note(self, message: str) -> None:
        """A permanent line above the status line."""
        self._above(f"{self._note_prefix}{sanitize(message)}")

    def _above(self, line: str) -> None:
        self._clear()
        self.out.write(f"{line}\n")
        self.out.flush()
        self._draw(force=True)

    def close(self) -> None:
        self._end_line()
        self.current = ""
        release_line(self.out)

    def _end_line(self) -> None:
        if self._keep and self.current:
            self._draw(force=True)
            self.out.write("\n")
            self.out.flush()
            self._drawn = False
        else:
            self._clear()

    def _clear(self) -> None:
        if self._drawn:
            self.out.write("\r\x1b[2K")
            self._drawn = False

    def _draw(self, *, force: bool = False) -> None:
        if not self.current:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < self._min_interval:
            return
        self._last_draw = now
        self.out.write("\r\x1b[2K" + self._line(now))
        self.out.flush()
        self._drawn = True

    def _line(self, now: float) -> str:
        elapsed = now - self.started
        total = f"/{self.planned}" if self.planned else ""
        stages = ", ".join(f"{name} {n}" for name, n in sorted(self.by_stage.items()))
        detail = f" ({stages})" if stages else ""
        errors = f"  errors {self.errors}" if self.errors else ""
        errors = (f"  cache hits {self.cache_hits}" if self.cache_hits else "") + errors
        eta = ""
        if self.done and self.planned > self.done:
            eta = f"  eta {elapsed / self.done * (self.planned - self.done):.0f}s"
        line = f"[{self.current}] calls {self.done}{total}{detail}{errors}{eta}  {elapsed:.0f}s"
        return line + self._waiting(now)

    def _waiting(self, now: float) -> str:
        """What is in flight, once no answer came for a tick: slow, not hung."""
        if self._in_flight is None or now - self.last_answer < _TICK:
            return ""
        count, member, age = self._in_flight()
        if not count:
            return ""
        quiet = now - max(self.last_answer, self.started)
        return (
            f"  in flight {count}, last answer {quiet:.0f}s ago, waiting on {member} ({age:.0f}s)"
        )


async def keep_ticking(progress: object, *, interval: float = _TICK) -> None:
    """Redraw ``progress`` every ``interval`` seconds while it is a live display (run it
    beside the work in a task group; cancelled with it). Anything else: returns at once."""
    tick = getattr(progress, "tick", None)
    if not callable(tick):
        return
    while True:
        await anyio.sleep(interval)
        tick()


def terminal_progress(
    stream: TextIO | None = None, *, keep_stage_lines: bool = False, note_prefix: str = ""
) -> TtyProgress | None:
    """A live display when ``stream`` (stderr by default) is a terminal, else ``None``."""
    out = stream or sys.stderr
    if not out.isatty():
        return None
    return TtyProgress(out, keep_stage_lines=keep_stage_lines, note_prefix=note_prefix)
