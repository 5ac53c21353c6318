"""A fanned-out skill's progress on the night's live display.

Each skill learns in a night of its own; its calls count on the night's display under the
skill's name (``[round1.trial_skill] calls 40/60 (skill code-search 12, ...)``) so a
terminal shows the skills working, not only the logs. The skill's own stages and notes
go to the structured logs, bound to the skill's name.
"""

from __future__ import annotations

from skillopt.logging import get_logger
from skillopt.redact import sanitize
from skillopt_sleep.night_progress import NightProgress

__all__ = ["SkillProgress"]

_log = get_logger(__name__)


class SkillProgress:
    """Forwards a skill night's calls to the parent night's progress, labelled by skill."""

    def __init__(self, parent: NightProgress, skill: str) -> None:
        self.parent = parent
        self.skill = skill
        self.label = f"skill {skill}"
        self.current = ""
        self.done = 0
        self.errors = 0

    def stage(self, name: str) -> None:
        if self.current:
            self._stage_done()
        self.current, self.done, self.errors = name, 0, 0
        _log.info("skills.stage", skill=self.skill, stage=name)

    def calls_planned(self, n: int) -> None:
        self.parent.calls_planned(n)

    def call_done(self, *, ok: bool = True, stage: str = "", cached: bool = False) -> None:
        if not cached:
            self.done += 1
            self.errors += 0 if ok else 1
        self.parent.call_done(ok=ok, stage=self.label, cached=cached)

    def note(self, message: str) -> None:
        _log.info("skills.note", skill=self.skill, stage=self.current, message=sanitize(message))

    def close(self) -> None:
        if self.current:
            self._stage_done()
        self.current = ""

    def _stage_done(self) -> None:
        _log.info("skills.stage_done", skill=self.skill, stage=self.current,
                  calls=self.done, errors=self.errors)  # fmt: skip
