"""The night report (``report.json``) as a frozen model, :class:`NightReport`: what the
Markdown and HTML reports render and what ``status``, ``report`` and tools read; and the
two records drawn from it, the project's history entry and the
:class:`.outcome.NightOutcome` the caller gets.

The JSON keeps the field names and meanings of every earlier ``report.json`` (readers of
old run directories read the file as plain JSON): :meth:`NightReport.to_json` leaves out
the keys a night without tasks, an estimate or a commit never wrote.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer

from skillopt.types import GateAction, Split
from skillopt_sleep import rundir
from skillopt_sleep.edit_ids import with_id
from skillopt_sleep.ledger import build_ledger
from skillopt_sleep.night.course import Course, TestScore
from skillopt_sleep.night.gather_tasks import Gathered
from skillopt_sleep.night.line_removals import watched_report
from skillopt_sleep.night.night_state import Night
from skillopt_sleep.night.outcome import Live, NightOutcome, NightResult
from skillopt_sleep.rundir import RunStatus, iso
from skillopt_sleep.state import NightEntry, ProjectState

__all__ = [
    "ChartPoint",
    "HarvestSummary",
    "NightReport",
    "TasksSummary",
    "build_report",
    "history_entry",
    "night_outcome",
]

SCHEMA = "skillopt-sleep-report/1"

JsonObject = dict[str, Any]

#: An instant, written as the run journal writes it (``2026-11-25T03:00:00Z``).
Instant = Annotated[datetime, PlainSerializer(iso, return_type=str)]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TasksSummary(_Frozen):
    """Tonight's tasks: how many, learnable or test, in how many folds, from where."""

    total: int
    learnable: int
    test: int
    folds: int
    source: str
    new: int
    recalled: int


class HarvestSummary(_Frozen):
    """What the harvest left for later nights, and why a night had no task."""

    backlog: int
    outside_window: int
    why_nothing: str
    notes: tuple[str, ...]


class ChartPoint(_Frozen):
    """One night on the learning curve (earlier nights from the history, then tonight)."""

    night: int
    score: float | None
    label: str
    baseline: float | None
    candidate: float | None
    accepted: int
    rejected: int
    untested: int
    tasks: int


class NightReport(_Frozen):
    """``report.json``. Edits, trials and deltas are the records' own JSON forms."""

    schema_: str = Field(default=SCHEMA, serialization_alias="schema")
    run_id: str
    run_dir: Path
    night: int
    project: Path
    project_name: str
    started_at: Instant
    dry_run: bool
    demo: bool
    metric: str
    gate_mode: str
    live_skill: Path
    live_memory: Path
    resumed: bool
    resumable: bool
    status: RunStatus
    result: NightResult
    reason: str
    failed_stage: str
    ended_at: Instant
    accepted: bool
    # no decision (a night that ended before its learning): "" in report.json
    gate_action: Annotated[GateAction | None, PlainSerializer(lambda a: a.value if a else "")]
    baseline: float | None
    candidate: float | None
    leaked: bool
    proposal_dir: Path | None
    test: TestScore | None
    notes: tuple[str, ...]
    spend: JsonObject
    # what each call bought: per stage calls, cache hits, tokens, provider-cached tokens and
    # calls that changed no decision (skillopt_sleep.ledger)
    ledger: JsonObject
    reused_rollouts: int
    auto_adopted: tuple[str, ...]
    accepted_edits: tuple[JsonObject, ...]
    rejected_edits: tuple[JsonObject, ...]
    untested_edits: tuple[JsonObject, ...]
    folds: dict[str, int]
    unmatched_edits: tuple[JsonObject, ...]
    proposed_edits: tuple[JsonObject, ...]
    no_edit_reasons: tuple[str, ...]
    trials: tuple[JsonObject, ...]
    task_deltas: tuple[JsonObject, ...]
    chart: tuple[ChartPoint, ...]
    # written only by a night that gathered tasks
    tasks: TasksSummary | None = None
    harvest: HarvestSummary | None = None
    task_intents: dict[str, str] | None = None
    n_sessions: int | None = None
    # written only by a night that estimated its spend
    estimate: str | None = None
    estimate_detail: JsonObject | None = None
    # written once the night is committed (archive_changes) and before the files are
    archive_changes: JsonObject | None = None
    archive: JsonObject | None = None
    # the model key and its advisory (a changed model: scores not comparable across nights)
    models: str = ""
    advisories: tuple[str, ...] = ()
    # written only by a night that fanned out to the project's own skills
    skills: tuple[JsonObject, ...] | None = None
    skill_routing: tuple[JsonObject, ...] | None = None
    skills_left_out: tuple[JsonObject, ...] | None = None
    memory_files: tuple[str, ...] | None = None
    managed_tasks: int | None = None
    # the memory step for rules several skills share (skillopt_sleep.night.skills.shared)
    shared_memory: JsonObject | None = None
    # written only when adopted learned lines are watched (skillopt_sleep.line_watch)
    watched_lines: tuple[JsonObject, ...] | None = None
    # tasks whose calls kept failing while others answered: left untested tonight
    set_aside: tuple[JsonObject, ...] | None = None

    def to_json(self) -> JsonObject:
        """The JSON object of ``report.json``; keys this night did not reach are absent."""
        data = self.model_dump(mode="json", by_alias=True)
        return {k: v for k, v in data.items() if not (k in _ABSENT_WHEN_NONE and v is None)}


_ABSENT_WHEN_NONE = frozenset(
    {"tasks", "harvest", "task_intents", "n_sessions", "estimate", "estimate_detail",
     "archive_changes", "archive", "skills", "skill_routing", "skills_left_out",
     "memory_files", "managed_tasks", "shared_memory", "watched_lines", "set_aside"}
)  # fmt: skip


def build_report(
    night: Night,
    course: Course,
    state: ProjectState,
    live: Live,
    *,
    night_no: int,
    ended: datetime,
    demo: bool,
) -> NightReport:
    """``report.json``: what the report renders and what ``status`` and tools read."""
    run, decision = night.run, course.decision
    estimate = course.estimate if course.estimate and course.estimate.said else None
    return NightReport(
        run_id=run.run_id,
        run_dir=run.path,
        night=night_no,
        project=night.project,
        project_name=night.project.name,
        started_at=datetime.fromisoformat(run.journal.started_at.replace("Z", "+00:00")),
        dry_run=night.dry_run,
        demo=demo,
        metric=night.cfg.gate.metric,
        gate_mode=night.cfg.gate.mode,
        live_skill=live.skill_path,
        live_memory=live.memory_path,
        resumed=night.resumed,
        resumable=bool(night.run.journal.resumable)
        and course.status in (RunStatus.FAILED, RunStatus.WAITING),
        status=course.status,
        result=course.result,
        reason=course.reason,
        failed_stage=course.failed_stage,
        ended_at=ended,
        accepted=course.accepted,
        gate_action=decision.action if decision else None,
        baseline=_finite(decision.baseline) if decision else None,
        candidate=_finite(decision.candidate) if decision else None,
        leaked=bool(decision and decision.final and decision.final.leaked),
        proposal_dir=course.proposal_dir,
        test=course.test,
        notes=tuple(night.notes),
        spend=night.spend.summary(),
        ledger=build_ledger(
            night.spend.summary(), night.replayer.costs, consistent=night.consistent_tonight is True
        ),
        reused_rollouts=night.replayer.reused,
        auto_adopted=tuple(course.adopted),
        estimate=estimate.said if estimate else None,
        estimate_detail=estimate.detail if estimate else None,
        chart=_chart(state, _tonight_point(course, night_no)),
        watched_lines=watched_report(night, course),
        set_aside=tuple(
            {"task": task, "why": why} for task, why in sorted(night.replayer.set_aside.items())
        )
        or None,
        **_edits_report(night, course),
        **_tasks_report(night, course.gathered, kept=course.committed and not night.dry_run),
        **(course.fanout.report() if course.fanout else {}),
    )


def _edits_report(night: Night, course: Course) -> dict[str, Any]:
    decision, accepted = course.decision, course.accepted
    singles = [t for t in night.trials if t.kind == "single"]
    return {
        "accepted_edits": [with_id(e) for e in decision.applied] if decision and accepted else [],
        "rejected_edits": [e.to_dict() for e in decision.rejected] if decision else [],
        "untested_edits": [c.to_dict() for c in decision.untested] if decision else [],
        "folds": decision.folds if decision else {},
        "unmatched_edits": [e.to_dict() for t in singles for e in t.unmatched],
        "proposed_edits": [e.to_dict() for t in singles for e in t.edits],
        "no_edit_reasons": night.no_edit_reasons,
        "trials": [t.to_dict() for t in night.trials],
        "task_deltas": _final_deltas(night),
    }


def _tasks_report(night: Night, gathered: Gathered | None, *, kept: bool) -> dict[str, Any]:
    if gathered is None:
        return {}
    tasks = gathered.tasks
    learn = [t for t in tasks if t.split is not Split.TEST]
    return {
        "tasks": TasksSummary(
            total=len(tasks),
            learnable=len(learn),
            test=len(tasks) - len(learn),
            folds=min(night.cfg.night.folds, len(learn)),
            source=gathered.source,
            new=len(gathered.new_tasks),
            recalled=gathered.n_recalled,
        ),
        "harvest": HarvestSummary(
            backlog=gathered.pending(consumed=kept),
            outside_window=gathered.outside_window,
            why_nothing=gathered.why_nothing,
            notes=gathered.notes,
        ),
        "task_intents": {t.id: t.intent for t in tasks},
        "n_sessions": gathered.n_sessions,
    }


def _tonight_point(course: Course, night_no: int) -> ChartPoint:
    decision, accepted = course.decision, course.accepted
    score = None
    if decision is not None:
        score = decision.candidate if accepted else decision.baseline
    return ChartPoint(
        night=night_no,
        score=_finite(score),
        label="← tonight",
        baseline=_finite(decision.baseline) if decision else None,
        candidate=_finite(decision.candidate) if decision else None,
        accepted=len(decision.applied) if decision and accepted else 0,
        rejected=len(decision.rejected) if decision else 0,
        untested=len(decision.untested) if decision else 0,
        tasks=len(course.gathered.tasks) if course.gathered else 0,
    )


def _chart(state: ProjectState, tonight: ChartPoint) -> list[ChartPoint]:
    """The learning curve: each earlier night's score of the documents it started from (the
    adopted ones), then tonight's staged (or unchanged) documents."""
    latest = {entry.run_id: entry for entry in state.history}  # a run recorded twice, once
    points = [
        ChartPoint(
            night=entry.night,
            score=entry.baseline,
            label=entry.status.value + (" (kept edits)" if entry.accepted else ""),
            baseline=entry.baseline,
            candidate=entry.candidate,
            accepted=entry.kept_edits,
            rejected=entry.rejected_edits,
            untested=entry.untested_edits,
            tasks=entry.n_tasks,
        )
        for entry in list(latest.values())[-14:]
        if entry.night != tonight.night
    ]
    return [*points, tonight]


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


def _final_deltas(night: Night) -> list[dict[str, Any]]:
    for trial in reversed(night.trials):
        if trial.decision is not None and trial.kind in ("final", "union"):
            return [d.to_dict() for d in trial.decision.task_deltas]
    return []


def history_entry(night: Night, course: Course, report: NightReport) -> NightEntry:
    return NightEntry(
        night=report.night,
        run_id=report.run_id,
        started_at=report.started_at,
        status=NightResult.NO_TASKS
        if course.result is NightResult.NO_TASKS
        else RunStatus.COMPLETE,
        accepted=course.accepted,
        baseline=report.baseline,
        candidate=report.candidate,
        n_tasks=len(course.gathered.tasks) if course.gathered else 0,
        run_dir=str(night.run.path),
        kept_edits=len(report.accepted_edits),
        rejected_edits=len(report.rejected_edits),
        untested_edits=len(report.untested_edits),
    )


def night_outcome(night: Night, course: Course, report: NightReport) -> NightOutcome:
    run = night.run
    return NightOutcome(
        status=course.status,
        result=course.result,
        run_id=run.run_id,
        run_dir=run.path,
        report_path=run.path / rundir.REPORT_MD,
        proposal_dir=course.proposal_dir,
        accepted=course.accepted,
        gate_action=report.gate_action,
        baseline=report.baseline,
        candidate=report.candidate,
        test_score=report.test.score if report.test else None,
        n_sessions=report.n_sessions or 0,
        n_tasks=report.tasks.total if report.tasks else 0,
        reason=course.reason,
        failed_stage=course.failed_stage,
        resumed=night.resumed,
        dry_run=night.dry_run,
        spend=night.spend.summary(),
    )
