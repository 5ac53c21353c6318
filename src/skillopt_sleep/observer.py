"""A seam for watching a night move through its stages.

The night tells its observer when a stage starts, when it ends (after ``run.json`` recorded
it) and how many rollouts are on disk after each append. Production passes none; the resume
tests pass one that kills its own process at a chosen point (``tests/support/killing_night.py``),
so no test hook lives in the night itself.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["NO_OBSERVER", "StageObserver"]


class StageObserver(Protocol):
    def stage_started(self, name: str) -> None: ...

    def stage_ended(self, name: str) -> None:
        """Called once the journal holds the stage as done."""
        ...

    def rollouts_recorded(self, total: int) -> None:
        """``total`` rollouts have been appended to disk since this process started the night."""
        ...


class _NoObserver:
    def stage_started(self, name: str) -> None:
        return None

    def stage_ended(self, name: str) -> None:
        return None

    def rollouts_recorded(self, total: int) -> None:
        return None


NO_OBSERVER: StageObserver = _NoObserver()
