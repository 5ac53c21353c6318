"""Frozen records the task archive hands out, and the policy that bounds a night's recall."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from skillopt.types import EditRecord, TaskRecord

if TYPE_CHECKING:
    from skillopt_sleep.config import NightSettings

__all__ = [
    "ArchivePolicy",
    "ArchiveStats",
    "ArchivedTask",
    "CarriedEdit",
    "CarriedEditStatus",
    "HarvestWindow",
    "MinedSession",
    "NoiseEstimate",
    "Question",
    "SampleAnswer",
    "Supersession",
    "TriedDocuments",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchivePolicy:
    """When a task stops being replayed. 0 turns a rule off.

    ``retire_after_passes``: passed on that many consecutive nights (its latest outcomes).
    ``retire_after_days``: not seen in any harvested session for that many days.
    """

    retire_after_passes: int = 3
    retire_after_days: float = 30.0

    @classmethod
    def from_settings(cls, night: NightSettings) -> ArchivePolicy:
        return cls(
            retire_after_passes=night.retire_after_passes,
            retire_after_days=night.retire_after_days,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchivedTask:
    """One task of the archive with its provenance and outcome summary.

    ``pass_streak`` counts the consecutive latest nights it passed on; ``last_passed`` is
    ``None`` while it has never been measured. ``recurrences`` is the number of distinct
    sessions it was mined from.
    """

    task: TaskRecord
    first_seen: datetime
    last_seen: datetime
    first_night: int
    last_night: int
    recurrences: int
    sessions: tuple[str, ...]
    retired_at: datetime | None = None
    retired_why: str = ""
    last_passed: bool | None = None
    pass_streak: int = 0

    @property
    def id(self) -> str:
        return self.task.id

    @property
    def retired(self) -> bool:
        return self.retired_at is not None

    @property
    def failing(self) -> bool:
        """Not passing on its latest outcome (or never measured): worth replaying first."""
        return self.last_passed is not True


class CarriedEditStatus(StrEnum):
    """Where an edit carried across nights stands in the task archive."""

    PENDING = "pending"  # carried: waiting for a night whose held-out tasks exercise it
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    DROPPED = "dropped"  # carried too long, or superseded


@dataclass(frozen=True, slots=True, kw_only=True)
class CarriedEdit:
    """An edit carried across nights, with the task ids its reflection saw (never valid as
    held-out evidence for it)."""

    id: int
    edit: EditRecord
    seen_task_ids: frozenset[str]
    first_night: int
    last_night: int
    nights_carried: int
    status: CarriedEditStatus
    why: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Supersession:
    """An archived task newer sessions contradict: kept with the evidence, never replayed.

    ``by_tasks`` are the newer tasks whose references cannot pass together with this one's
    (measured: the edit of ``about`` that makes them pass makes this one fail), ``since``
    when that newer evidence was first seen."""

    task_id: str
    night: int
    marked_at: datetime
    since: datetime
    by_tasks: tuple[str, ...]
    about: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "night": self.night,
            "marked_at": self.marked_at.isoformat(),
            "since": self.since.isoformat(),
            "by_tasks": list(self.by_tasks),
            "about": self.about,
            "why": self.why,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class MinedSession:
    """The mining cache's entry for one session digest: what mining it produced."""

    digest_key: str
    miner: str
    tasks: tuple[TaskRecord, ...]
    calls: int = 0
    fallback_cause: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Question:
    """What determines a sample's verdict, apart from its sample id: the task as the target
    and the judge see it, the documents, and the models and settings (``answer_key``)."""

    task_id: str
    task_hash: str
    docs_hash: str
    answer_key: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleAnswer:
    """One judged sample: its question, sample id and the gate's score of it."""

    question: Question
    sample_id: int
    score: float


@dataclass(frozen=True, slots=True, kw_only=True)
class NoiseEstimate:
    """How one question's recorded samples agree (across every night that drew them).

    ``disagreement`` is the share of pairs of distinct samples whose scores differ (0 when
    they all agree, or with fewer than two samples): an unbiased estimate of the chance two
    fresh samples would disagree. A task is *steady* when it has samples and they all agree.
    """

    samples: int = 0
    passes: int = 0  # samples whose score is a full pass (>= 1.0)
    low: float = 0.0  # lowest and highest sample score
    high: float = 0.0
    disagreement: float = 0.0
    last_night: int = 0  # the newest night that drew one of them (the drift check's staleness)

    @property
    def steady(self) -> bool:
        return self.samples > 0 and self.high - self.low <= 1e-9

    def steady_pass(self, min_samples: int) -> bool:
        """Every one of at least ``min_samples`` samples passed."""
        return self.steady and self.samples >= min_samples and self.low >= 1.0

    def steady_fail(self, min_samples: int) -> bool:
        """Every one of at least ``min_samples`` samples failed, with the same score."""
        return self.steady and self.samples >= min_samples and self.high < 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TriedDocuments:
    """What one task's recorded samples say under every document the nights tried it under,
    the same task (its hash) and models and settings (an answer key)."""

    documents: int = 0  # distinct documents (skill.memory hashes) with a recorded sample
    samples: int = 0
    passes: int = 0  # samples whose score is a full pass (>= 1.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class HarvestWindow:
    """Where a harvest starts. ``fixed`` once something was harvested (or the user set it
    with ``harvest --since``): a moving ``now - lookback`` window applies only before."""

    start: datetime | None
    fixed: bool
    lookback_hours: float

    @classmethod
    def moving(cls, lookback_hours: float, now: datetime) -> HarvestWindow:
        """The last ``lookback_hours`` before ``now`` (0 = all history): the one rule for a
        window not fixed yet, ``--lookback-hours`` and the every-project preview."""
        start = None if lookback_hours <= 0 else now - timedelta(hours=lookback_hours)
        return cls(start=start, fixed=False, lookback_hours=lookback_hours)


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchiveStats:
    tasks: int
    active: int
    retired: int
    failing: int
    outcomes: int
    harvested_sessions: int
    cached_sessions: int
    pending_edits: int
    backlog: int  # pending sessions the last harvest left for later nights
    outside_window: int  # pending sessions older than the window at the last harvest
    last_harvest_night: int  # 0 = never
    window_start: datetime | None  # None: all history (when fixed), else not set yet
    window_fixed: bool = False
    migrated: str = ""  # what was brought over from state.json, if anything
    superseded: int = 0  # contradicted by newer sessions: kept, never replayed
    supersessions: tuple[str, ...] = ()  # what was superseded and why, one line a group
    # who counted backlog/outside_window: "" = the last night's harvest, else the command
    # that moved the window since (its preview counted them)
    counted_by: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "active": self.active,
            "retired": self.retired,
            "failing": self.failing,
            "outcomes": self.outcomes,
            "harvested_sessions": self.harvested_sessions,
            "cached_sessions": self.cached_sessions,
            "pending_edits": self.pending_edits,
            "backlog": self.backlog,
            "outside_window": self.outside_window,
            "last_harvest_night": self.last_harvest_night,
            "window_start": self.window_start.isoformat() if self.window_start else None,
            "window_fixed": self.window_fixed,
            "migrated": self.migrated,
            "superseded": self.superseded,
            "supersessions": list(self.supersessions),
            "counted_by": self.counted_by,
        }
