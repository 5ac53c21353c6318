"""How a night has gone so far (:class:`Course`), filled in stage by stage, read by the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillopt.types import EditRecord
from skillopt_sleep.night.gather_tasks import Gathered
from skillopt_sleep.night.outcome import NightResult
from skillopt_sleep.night.rounds import Decision
from skillopt_sleep.rundir import RunStatus

__all__ = ["Course"]


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
    test: dict[str, Any] | None = None
    estimate: str = ""
    estimate_detail: dict[str, Any] = field(default_factory=dict)
    proposal_dir: Path | None = None
    adopted: list[str] = field(default_factory=list)
    staging_failed: bool = False

    def fail(self, stage: str, reason: str) -> None:
        self.status, self.result = RunStatus.FAILED, NightResult.FAILED
        self.failed_stage, self.reason = stage, reason

    @property
    def accepted(self) -> bool:
        return bool(self.decision and self.decision.accepted) and not self.staging_failed

    @property
    def committed(self) -> bool:
        """Whether this night's harvest, outcomes and history are kept (complete, not dry)."""
        return self.status is RunStatus.COMPLETE
