"""How a night has gone so far (:class:`Course`), filled in stage by stage from the stages'
typed results (:class:`Estimate`, :class:`TestScore`, :class:`Staged`), read by the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from skillopt.types import EditRecord
from skillopt_sleep.night.gather_tasks import Gathered
from skillopt_sleep.night.learn.decision import Decision
from skillopt_sleep.night.outcome import NightResult
from skillopt_sleep.night.skills.fanout import Fanout
from skillopt_sleep.rundir import RunStatus

__all__ = ["Course", "Estimate", "Staged", "TestScore"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """The up-front spend estimate: as said to the user, and its numbers for the report."""

    said: str
    detail: dict[str, Any]


class TestScore(BaseModel):
    """The test split, scored after the decision: tonight's final documents (``score``) and,
    when they changed, the live ones (``before``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n: int
    score: float
    before: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Staged:
    """What staging an accepted night produced: the proposal, what auto-adopt adopted, or
    why staging failed (``failure``; the night then fails in its ``stage`` stage)."""

    proposal_dir: Path | None = None
    adopted: tuple[str, ...] = ()
    failure: str = ""


@dataclass(kw_only=True)
class Course:
    """How the night has gone so far: filled in stage by stage, read by the report."""

    status: RunStatus = RunStatus.COMPLETE
    result: NightResult = NightResult.REJECTED
    reason: str = ""
    failed_stage: str = ""
    gathered: Gathered | None = None
    decision: Decision | None = None
    carried_ids: dict[EditRecord, int] = field(default_factory=dict)
    test: TestScore | None = None
    estimate: Estimate | None = None
    proposal_dir: Path | None = None
    adopted: list[str] = field(default_factory=list)
    staging_failed: bool = False
    fanout: Fanout | None = None  # the project's own skills, each learning on its tasks

    def fail(self, stage: str, reason: str) -> None:
        self.status, self.result = RunStatus.FAILED, NightResult.FAILED
        self.failed_stage, self.reason = stage, reason

    def wait(self, stage: str, reason: str) -> None:
        """Handoff mode: the night stopped in ``stage`` until its prompts are answered."""
        self.status, self.result = RunStatus.WAITING, NightResult.WAITING
        self.failed_stage, self.reason = stage, reason

    def staged(self, staged: Staged) -> None:
        """Record what staging produced; a staging failure fails the night, unaccepted."""
        self.proposal_dir, self.adopted = staged.proposal_dir, list(staged.adopted)
        if staged.failure:
            self.fail("stage", staged.failure)
            self.staging_failed = True

    @property
    def accepted(self) -> bool:
        return bool(self.decision and self.decision.accepted) and not self.staging_failed

    @property
    def committed(self) -> bool:
        """Whether this night's harvest, outcomes and history are kept (complete, not dry)."""
        return self.status is RunStatus.COMPLETE
