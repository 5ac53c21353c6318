"""The night report (``report.json``): what the Markdown and HTML reports render and what
``status``, ``report`` and tools read; and the two records drawn from it, the project's
history entry and the :class:`.outcome.NightOutcome` the caller gets.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from skillopt.types import Split
from skillopt_sleep import rundir
from skillopt_sleep.night.course import Course
from skillopt_sleep.night.gather_tasks import Gathered
from skillopt_sleep.night.outcome import Live, NightOutcome, NightResult
from skillopt_sleep.night.running import Night
from skillopt_sleep.rundir import RunStatus, iso
from skillopt_sleep.state import NightEntry, NightStatus, ProjectState

__all__ = ["build_report", "history_entry", "night_outcome"]


def build_report(
    night: Night,
    course: Course,
    state: ProjectState,
    live: Live,
    *,
    night_no: int,
    ended: datetime,
    demo: bool,
) -> dict[str, Any]:
    """``report.json``: what the report renders and what ``status`` and tools read."""
    run, decision, gathered = night.run, course.decision, course.gathered
    accepted = course.accepted
    report: dict[str, Any] = {
        "schema": "skillopt-sleep-report/1",
        "run_id": run.run_id,
        "run_dir": str(run.path),
        "night": night_no,
        "project": str(night.project),
        "project_name": night.project.name,
        "started_at": run.journal["started_at"],
        "dry_run": night.dry_run,
        "demo": demo,
        "metric": night.cfg.gate.metric,
        "live_skill": str(live.skill_path),
        "live_memory": str(live.memory_path),
        "resumed": night.resumed,
        "resumable": bool(night.run.journal.get("resumable")) and course.status is RunStatus.FAILED,
        "status": course.status.value,
        "result": course.result.value,
        "reason": course.reason,
        "failed_stage": course.failed_stage,
        "ended_at": iso(ended),
        "accepted": accepted,
        "gate_action": decision.action if decision else "",
        "baseline": _finite(decision.baseline) if decision else None,
        "candidate": _finite(decision.candidate) if decision else None,
        "leaked": bool(decision and decision.final and decision.final.leaked),
        "proposal_dir": str(course.proposal_dir) if course.proposal_dir else None,
        "test": course.test,
        "notes": night.notes,
        "spend": night.spend.summary(),
        "reused_rollouts": night.replayer.reused,
        "auto_adopted": course.adopted,
        **_edits_report(night, course),
        **_tasks_report(night, gathered),
    }
    if course.estimate:
        report["estimate"] = course.estimate
        report["estimate_detail"] = course.estimate_detail
    report["chart"] = _chart(state, _tonight_point(course, night_no))
    return report


def _edits_report(night: Night, course: Course) -> dict[str, Any]:
    decision, accepted = course.decision, course.accepted
    singles = [t for t in night.trials if t.kind == "single"]
    return {
        "accepted_edits": [e.to_dict() for e in decision.applied] if decision and accepted else [],
        "rejected_edits": [e.to_dict() for e in decision.rejected] if decision else [],
        "untested_edits": [c.to_dict() for c in decision.untested] if decision else [],
        "folds": decision.folds if decision else {},
        "unmatched_edits": [e.to_dict() for t in singles for e in t.unmatched],
        "proposed_edits": [e.to_dict() for t in singles for e in t.edits],
        "no_edit_reasons": night.no_edit_reasons,
        "trials": [t.to_dict() for t in night.trials],
        "task_deltas": _final_deltas(night),
    }


def _tasks_report(night: Night, gathered: Gathered | None) -> dict[str, Any]:
    if gathered is None:
        return {}
    tasks = gathered.tasks
    learn = [t for t in tasks if t.split is not Split.TEST]
    return {
        "tasks": {
            "total": len(tasks),
            "learnable": len(learn),
            "test": len(tasks) - len(learn),
            "folds": min(night.cfg.night.folds, len(learn)),
            "source": gathered.source,
            "new": len(gathered.new_tasks),
            "recalled": gathered.n_recalled,
        },
        "harvest": {
            "backlog": gathered.backlog,
            "outside_window": gathered.outside_window,
            "why_nothing": gathered.why_nothing,
            "notes": list(gathered.notes),
        },
        "task_intents": {t.id: t.intent for t in tasks},
        "n_sessions": gathered.n_sessions,
    }


def _tonight_point(course: Course, night_no: int) -> dict[str, Any]:
    decision, accepted = course.decision, course.accepted
    score = None
    if decision is not None:
        score = decision.candidate if accepted else decision.baseline
    return {
        "night": night_no,
        "score": _finite(score),
        "baseline": _finite(decision.baseline) if decision else None,
        "candidate": _finite(decision.candidate) if decision else None,
        "accepted": len(decision.applied) if decision and accepted else 0,
        "rejected": len(decision.rejected) if decision else 0,
        "untested": len(decision.untested) if decision else 0,
        "tasks": len(course.gathered.tasks) if course.gathered else 0,
    }


def _chart(state: ProjectState, tonight: dict[str, Any]) -> list[dict[str, Any]]:
    """The learning curve: each earlier night's score of the documents it started from (the
    adopted ones), then tonight's staged (or unchanged) documents."""
    points: list[dict[str, Any]] = []
    latest = {entry.run_id: entry for entry in state.history}  # a run recorded twice, once
    for entry in list(latest.values())[-14:]:
        if entry.night == tonight["night"]:
            continue
        points.append(
            {
                "night": entry.night,
                "score": entry.baseline,
                "label": entry.status.value + (" (kept edits)" if entry.accepted else ""),
                "baseline": entry.baseline,
                "candidate": entry.candidate,
                "accepted": entry.kept_edits,
                "rejected": entry.rejected_edits,
                "untested": entry.untested_edits,
                "tasks": entry.n_tasks,
            }
        )
    points.append({**tonight, "label": "← tonight"})
    return points


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


def _final_deltas(night: Night) -> list[dict[str, Any]]:
    for trial in reversed(night.trials):
        if trial.decision is not None and trial.kind in ("final", "union"):
            return [d.to_dict() for d in trial.decision.task_deltas]
    return []


def history_entry(
    night: Night, course: Course, report: dict[str, Any], night_no: int
) -> NightEntry:
    started = datetime.fromisoformat(str(night.run.journal["started_at"]).replace("Z", "+00:00"))
    return NightEntry(
        night=night_no,
        run_id=night.run.run_id,
        started_at=started,
        status=NightStatus.NO_TASKS
        if course.result is NightResult.NO_TASKS
        else NightStatus.COMPLETE,
        accepted=course.accepted,
        baseline=report["baseline"],
        candidate=report["candidate"],
        n_tasks=len(course.gathered.tasks) if course.gathered else 0,
        run_dir=str(night.run.path),
        kept_edits=len(report["accepted_edits"]),
        rejected_edits=len(report["rejected_edits"]),
        untested_edits=len(report["untested_edits"]),
    )


def night_outcome(night: Night, course: Course, report: dict[str, Any]) -> NightOutcome:
    run = night.run
    return NightOutcome(
        status=course.status,
        result=course.result,
        run_id=run.run_id,
        run_dir=run.path,
        report_path=run.path / rundir.REPORT_MD,
        proposal_dir=course.proposal_dir,
        accepted=course.accepted,
        gate_action=report["gate_action"],
        baseline=report["baseline"],
        candidate=report["candidate"],
        test_score=(report.get("test") or {}).get("score"),
        n_sessions=report.get("n_sessions", 0),
        n_tasks=(report.get("tasks") or {}).get("total", 0),
        reason=course.reason,
        failed_stage=course.failed_stage,
        resumed=night.resumed,
        dry_run=night.dry_run,
        spend=night.spend.summary(),
    )
