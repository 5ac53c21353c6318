"""What a night returns: :class:`NightOutcome` (a night that cannot go on raises
:class:`skillopt.errors.RunFailedError`, naming the stage and the cause).

Also the live documents as the night read them (:class:`Live`): their text and sha256,
the pins a proposal is staged against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillopt.errors import ConfigError
from skillopt.skilldoc import content_hash
from skillopt.types import GateAction
from skillopt_sleep.night_end import NightResult, RunStatus

__all__ = ["EXIT_WAITING", "Live", "NightOutcome", "NightResult", "read_live"]

# Handoff mode: the night stopped until its prompts are answered (sysexits' EX_TEMPFAIL:
# "try again later"); the CLI's exit-code table has it as well.
EXIT_WAITING = 75


@dataclass(frozen=True, slots=True, kw_only=True)
class NightOutcome:
    """What a night produced; ``exit_code`` is what the CLI returns."""

    status: RunStatus
    result: NightResult
    run_id: str = ""
    run_dir: Path | None = None
    report_path: Path | None = None
    proposal_dir: Path | None = None
    accepted: bool = False
    gate_action: GateAction | None = None  # None: the night decided nothing
    baseline: float | None = None
    candidate: float | None = None
    test_score: float | None = None
    n_sessions: int = 0
    n_tasks: int = 0
    reason: str = ""
    failed_stage: str = ""
    resumed: bool = False
    dry_run: bool = False
    spend: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if self.status is RunStatus.WAITING:
            return EXIT_WAITING
        return 1 if self.status in (RunStatus.FAILED, RunStatus.ABORTED) else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.exit_code == 0,
            "status": self.status.value,
            "result": self.result.value,
            "run_id": self.run_id,
            "run_dir": str(self.run_dir) if self.run_dir else None,
            "report": str(self.report_path) if self.report_path else None,
            "proposal": str(self.proposal_dir) if self.proposal_dir else None,
            "accepted": self.accepted,
            "gate_action": self.gate_action.value if self.gate_action else "",
            "baseline": self.baseline,
            "candidate": self.candidate,
            "test_score": self.test_score,
            "n_sessions": self.n_sessions,
            "n_tasks": self.n_tasks,
            "reason": self.reason,
            "failed_stage": self.failed_stage,
            "resumed": self.resumed,
            "dry_run": self.dry_run,
            "spend": self.spend,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Live:
    """The live documents as read at the start of the night (never written here)."""

    skill_path: Path
    memory_path: Path
    skill: str
    memory: str
    skill_sha: str  # "" = file absent
    memory_sha: str
    # ``skill`` is the shared learned skill's lines under this project's front matter (the
    # project has no learned skill of its own yet): staged whenever the night stages
    skill_seeded: bool = False


def read_live(path: Path) -> tuple[str, str]:
    """(text, sha256 of the bytes); a missing file is ("", "")."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return "", ""
    except OSError as exc:
        raise ConfigError(f"cannot read live document: {exc.strerror}", source=str(path)) from exc
    try:
        return raw.decode("utf-8"), content_hash(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError("live document is not UTF-8", source=str(path)) from exc
