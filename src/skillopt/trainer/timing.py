"""Wall-clock bookkeeping of a training run: per-step phase seconds and the run's total.

Kept apart from every other output on purpose: ``timing.json`` files are the only ones that
differ between two runs given the same replies.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["RunTiming", "StepTimer"]


class StepTimer:
    """Seconds per phase of one step, e.g. ``{"rollout_s": 1.2, "reflect_s": 0.4}``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, key: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[key] = time.monotonic() - started

    def rounded(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.seconds.items()}


class RunTiming:
    """The run's ``timing.json``: every step's phases, the total, the pool's accounting."""

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._steps: dict[str, dict[str, float]] = {}
        self._extra: dict[str, Any] = {}

    def start(self) -> None:
        self._started = time.monotonic()

    def add_step(self, step: int, timer: StepTimer) -> None:
        self._steps[str(step)] = timer.rounded()

    def step(self, step: int) -> dict[str, float]:
        """A finished step's phases (its own ``timing.json``)."""
        return dict(self._steps[str(step)])

    def finish(self, pool_accounting: dict[str, Any] | None) -> None:
        self._extra["total_wall_time_s"] = round(time.monotonic() - self._started, 3)
        if pool_accounting is not None:
            self._extra["pool_accounting"] = pool_accounting

    def to_json(self) -> dict[str, Any]:
        return {"steps": dict(self._steps), **self._extra}
