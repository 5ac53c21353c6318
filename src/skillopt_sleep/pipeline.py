"""Drive one night through its stages and persist what it produced.

:func:`drive` is called by :func:`skillopt_sleep.night.run_night` once the run directory,
pool and progress display exist. It turns every way a night can end into a
:class:`NightOutcome` and always leaves ``run.json``, ``trials.json``,
``diagnostics.json``, ``report.json`` and ``report.md`` behind. The proposal and the skill
store are written only for a complete, accepted, non-dry night; state (harvest cursor,
night history) only for a complete non-dry night.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from skillopt.backends.patience import Patience, current_patience, patience_for
from skillopt.errors import BudgetExceededError, RefusedError, SkillOptError
from skillopt.logging import get_logger
from skillopt.redact import secret_kinds
from skillopt.skilldoc import migrate_on_read
from skillopt.types import EditRecord, ReferenceKind, Split, TaskRecord
from skillopt_sleep import rundir
from skillopt_sleep.consolidate import Decision, Night, consolidate, estimate_spend
from skillopt_sleep.crossfit import Candidate
from skillopt_sleep.gather import Gathered, commit_gathered, gather_night, uses_llm_miner
from skillopt_sleep.html import publish_night
from skillopt_sleep.model_change import model_advisory, model_key
from skillopt_sleep.outcome import Live, NightFailed, NightOutcome, NightResult, read_live
from skillopt_sleep.replay import Docs
from skillopt_sleep.report import render_markdown
from skillopt_sleep.retention import apply_retention
from skillopt_sleep.rundir import RunStatus, iso
from skillopt_sleep.skills.fanout import Fanout
from skillopt_sleep.staging import (
    RECEIPTS_NAME,
    Proposal,
    ProposalKind,
    SkillStore,
    load_manifest,
    scaffold_skill,
    sha256_file,
    staged_text,
    write_proposal,
)
from skillopt_sleep.state import NightEntry, NightStatus, ProjectState, StateStore, project_dir
from skillopt_sleep.tasks.archive import TaskArchive, archive_path, open_archive
from skillopt_sleep.tasks.records import ArchivePolicy, EditStatus
from skillopt_sleep.token_model import TokenModel, budget_warning, estimate_tokens


def _log() -> Any:
    """Looked up per call, so the logging config set by the CLI applies."""
    return get_logger("skillopt_sleep.night")


def _live(night: Night) -> Live:
    """The live documents as the night reads them: the pins are the bytes on disk; the
    text has the reference tool's older region markers migrated (once, recorded), so a
    learned block written by it is the one the night edits, never a second one."""
    skill_path = night.cfg.live_skill_path()
    memory_path = night.cfg.live_memory_path(night.project)
    skill, skill_sha = read_live(skill_path)
    memory, memory_sha = read_live(memory_path)
    skill, memory = (_migrated(night, path, text) for path, text in
                     ((skill_path, skill), (memory_path, memory)))  # fmt: skip
    return Live(
        skill_path=skill_path,
        memory_path=memory_path,
        skill=skill,
        memory=memory,
        skill_sha=skill_sha,
        memory_sha=memory_sha,
    )


def _migrated(night: Night, path: Path, text: str) -> str:
    migration = migrate_on_read(text)
    if migration.markers:
        note = (
            f"{path.name}: {migration.markers} older skillopt-sleep region marker(s) migrated "
            "to the current ones; the proposal carries the migrated document"
        )
        if note not in night.notes:
            night.notes.append(note)
    return migration.text


async def _gather(
    night: Night, archive: TaskArchive, started: datetime, tasks_file: Path | None
) -> Gathered:
    """Pending sessions mined (cached per session) plus recalled archive tasks; a resumed
    night reads back exactly what it gathered, so it commits what the original would."""
    run = night.run
    if night.resumed and run.stage_done("harvest"):
        rows = run.read_tasks()
        info = run.journal["checkpoint"].get("gather", {})
        return Gathered.restore([TaskRecord.from_dict(r) for r in rows], info)
    night.begin("harvest")
    gathered = await gather_night(
        night.cfg,
        project=night.project,
        archive=archive,
        pool=night.spend,
        use_llm=uses_llm_miner(night.cfg),
        now=started,
        tasks_file=tasks_file,
        clock=night.clock,
    )
    run.write_tasks(t.to_dict() for t in gathered.tasks)
    run.checkpoint("gather", gathered.checkpoint())
    for note in gathered.notes:
        night.progress.note(note)
    night.end(
        "harvest",
        tasks=len(gathered.tasks),
        sessions=gathered.n_sessions,
        recalled=gathered.n_recalled,
        backlog=gathered.backlog,
    )
    return gathered


def _carried(archive: TaskArchive) -> tuple[list[Candidate], dict[EditRecord, int]]:
    """Edits earlier nights could not test, with what their reflections saw."""
    pending = archive.carried_edits()
    candidates = [
        Candidate(
            edit=c.edit,
            fold=-1,
            seen=c.seen_task_ids,
            held_out=(),
            carried_nights=c.nights_carried,
        )
        for c in pending
    ]
    return candidates, {c.edit: c.id for c in pending}


MAX_CARRIED_NIGHTS = 5


def _commit_archive(
    night: Night,
    archive: TaskArchive,
    gathered: Gathered,
    decision: Decision | None,
    carried_ids: dict[EditRecord, int],
    *,
    night_no: int,
    now: datetime,
    docs_hash: str,
) -> dict[str, Any]:
    """Tonight's harvest, outcomes and carried edits into the archive (idempotent)."""
    commit_gathered(archive, gathered, night=night_no, now=now)
    if decision is None:
        return {}
    scores = decision.start_scores
    archive.record_outcomes(
        night=night_no,
        run_id=night.run.run_id,
        docs_hash=docs_hash,
        scores={t: s for t, s in scores.items() if math.isfinite(s)},
        passed={t: s >= 1.0 for t, s in scores.items()},
        now=now,
    )
    settled = {c.edit: c for c in decision.untested}
    for edit, edit_id in carried_ids.items():
        if edit in decision.applied:
            archive.resolve_edit(edit_id, status=EditStatus.ACCEPTED, night=night_no, now=now,
                                 why="kept by the gate")  # fmt: skip
        elif edit in decision.rejected:
            archive.resolve_edit(edit_id, status=EditStatus.REJECTED, night=night_no, now=now,
                                 why="rejected by the gate")  # fmt: skip
    for cand in decision.untested:
        archive.carry_edits([cand.edit], seen_task_ids=cand.seen, night=night_no, now=now)
    for carried in archive.carried_edits():
        if carried.nights_carried > MAX_CARRIED_NIGHTS and carried.edit not in settled:
            archive.resolve_edit(
                carried.id, status=EditStatus.DROPPED, night=night_no, now=now,
                why=f"no night exercised it in {carried.nights_carried} nights",
            )  # fmt: skip
    retired = archive.retire(now=now, policy=ArchivePolicy.from_settings(night.cfg.night))
    return {"retired": [{"task_id": t, "why": w} for t, w in retired]}


async def _score_test(
    night: Night, test: list[TaskRecord], decision: Decision, start: Docs
) -> dict[str, Any] | None:
    if not test:
        return None
    night.begin("test")
    after = await night.measure(test, decision.docs, "test")
    before = None
    if decision.accepted:
        before = night.gate.mean(await night.measure(test, start, "test"))
    night.end("test")
    return {"n": len(test), "score": night.gate.mean(after), "before": before}


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


async def drive(night: Night, *, tasks_file: Path | None, demo: bool) -> NightOutcome:
    started = datetime.fromisoformat(str(night.run.journal["started_at"]).replace("Z", "+00:00"))
    path = archive_path(project_dir(night.cfg.state_path(), night.project))
    try:
        archive = open_archive(path, now=started)
    except SkillOptError as exc:
        night.run.finish(RunStatus.FAILED, night.clock(), outcome="failed", reason=str(exc),
                         failed_stage="harvest")  # fmt: skip
        raise
    patience = Patience(night.cfg.budget.outage_patience_seconds)
    with archive, patience_for(patience):
        return await _drive(night, archive, tasks_file=tasks_file, demo=demo)


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
    fanout: Fanout | None = None  # the project's own skills, each learning on its tasks

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


async def _drive(
    night: Night, archive: TaskArchive, *, tasks_file: Path | None, demo: bool
) -> NightOutcome:
    """The night as a list of stages; every way it can end becomes a NightOutcome."""
    store = StateStore(night.cfg.state_path())
    state, night_no = _number(night, store)
    models = model_key(night.cfg.pool)
    _warn_model_change(night, state.last_model_key, models)
    if night.resumed:
        night.replayer.preload(night.run.read_rollouts())
    live = _live(night)
    _warn_withheld(night, live)
    course = Course()
    await _learn(night, archive, course, live, night_no, tasks_file)
    _note_patience(night)
    _conclude(night, course, live, night_no)
    ended = night.clock()
    report = _report(night, course, state, live, night_no=night_no, ended=ended, demo=demo)
    report["models"] = models
    report["advisories"] = [a for a in [model_advisory(state.last_model_key, models)] if a]
    keep = course.committed and not night.dry_run
    if keep:
        night.begin("commit")
    if keep and course.gathered is not None:
        report["archive_changes"] = _commit_archive(
            night, archive, course.gathered, course.decision, course.carried_ids,
            night_no=night_no, now=ended, docs_hash=Docs(skill=live.skill, memory=live.memory).key,
        )  # fmt: skip
    report["archive"] = archive.stats().to_dict()
    _write_outputs(night, report, course.gathered)
    _learn_tokens(night)
    if keep:
        kept = state.record_night(_history_entry(night, course, report, night_no))
        store.save(kept.with_model_key(models) if models else kept)
        night.end("commit")
    night.run.finish(
        course.status, ended, outcome=course.result.value, reason=course.reason,
        failed_stage=course.failed_stage,
    )  # fmt: skip
    _retain(night)
    night.progress.close()  # the last stage's line comes before the night's
    _log().info(
        "night.done", run_id=night.run.run_id, status=course.status.value,
        result=course.result.value, accepted=course.accepted, baseline=report["baseline"],
        candidate=report["candidate"], calls=night.spend.calls,
    )  # fmt: skip
    return _outcome(night, course, report)


def _warn_model_change(night: Night, previous: str, current: str) -> None:
    """Tonight's scores are not comparable with the last night's: say so (log, display);
    the report carries it as an advisory."""
    advisory = model_advisory(previous, current)
    if advisory:
        night.progress.note(advisory)
        _log().warning("night.model_changed", previous=previous, current=current)


def _warn_withheld(night: Night, live: Live) -> None:
    """Say once that a live document holds secret-shaped text the model never saw (it was
    redacted on the way out) and that staging keeps it as it is."""
    found = [
        f"{path} ({', '.join(kinds)})"
        for path, text in ((live.skill_path, live.skill), (live.memory_path, live.memory))
        if (kinds := secret_kinds(text))
    ]
    if not found:
        return
    night.notes.append(
        "secret-shaped text in " + "; ".join(found) + " was withheld from the model "
        "(redacted in every prompt); a proposal keeps your lines as they are"
    )
    night.progress.note(night.notes[-1])
    _log().warning("night.secret_in_live_document", documents=found)


def _note_patience(night: Night) -> None:
    """Say how long the night waited for endpoints whose circuits were all open."""
    patience = current_patience()
    if patience is None or not patience.episodes:
        return
    waited = patience.spent()
    night.notes.append(
        f"waited {waited:.0f}s in all ({patience.episodes} time(s)) for endpoints whose "
        f"circuits were all open (patience {patience.budget:g}s, "
        "budget.outage_patience_seconds)"
    )
    night.progress.note(night.notes[-1])


def _number(night: Night, store: StateStore) -> tuple[ProjectState, int]:
    """Tonight's number: reserved once, kept by a resumed night.

    A real night's number is saved in the project state before the run journal records
    it, so a run killed at any point never hands its number to a later night (a run that
    is never resumed leaves a gap, never a duplicate). A dry run borrows the next number
    without reserving it.
    """
    state = store.load(night.project)
    night_no = int(night.run.journal.get("night") or 0)
    if not night_no:
        reserved, night_no = state.begin_night()
        if not night.dry_run:
            state = reserved
            store.save(state)
        night.run.journal["night"] = night_no
        night.run.save()
    return state, night_no


async def _learn(
    night: Night,
    archive: TaskArchive,
    course: Course,
    live: Live,
    night_no: int,
    tasks_file: Path | None,
) -> None:
    """Gather, learn, score the test split; how a stage failed goes into ``course``."""
    started = datetime.fromisoformat(str(night.run.journal["started_at"]).replace("Z", "+00:00"))
    try:
        course.gathered = await _gather(night, archive, started, tasks_file)
        tasks = list(course.gathered.tasks)
        learn = [t for t in tasks if t.split is not Split.TEST]
        test = [t for t in tasks if t.split is Split.TEST]
        if not learn:
            course.result = NightResult.NO_TASKS
            return
        course.estimate, course.estimate_detail = _announce_estimate(night, tasks, learn, test)
        start = Docs(skill=live.skill, memory=live.memory)
        carried, course.carried_ids = _carried(archive)
        fan = course.fanout = Fanout.plan(night, learn, memory=live.memory, night_no=night_no)
        course.decision = await fan.alongside(
            lambda tasks: consolidate(
                night, tasks=tasks, start=start, rotation=night_no, carried=carried
            ),
            start,
        )
        course.test = await _score_test(night, test, course.decision, start)
        if course.decision.accepted or fan.any_accepted:
            course.result = NightResult.ACCEPTED
        elif course.decision.nothing_to_learn or not any(t.applied for t in night.trials):
            course.result = NightResult.NO_EDITS
    except NightFailed as exc:
        course.fail(exc.stage, exc.cause)
        # An outage: the next night resumes this one and pays only for what never answered.
        night.run.journal["resumable"] = True
    except BudgetExceededError as exc:
        course.result = NightResult.BUDGET_REACHED
        course.reason = f"night budget reached during {exc}"
        night.notes.append(course.reason)
    except RefusedError as exc:
        course.fail("stage", str(exc))
    except BaseException as exc:
        # Interrupted (Ctrl-C, SIGTERM cancellation) or a bug: keep the run resumable.
        night.run.journal["resumable"] = True
        night.run.journal["spend"] = night.spend.summary()  # what this attempt paid, for the logs
        why = "interrupted" if not isinstance(exc, Exception) else f"{type(exc).__name__}: {exc}"
        night.run.finish(RunStatus.ABORTED, night.clock(), outcome="aborted", reason=why)
        raise


def _announce_estimate(
    night: Night, tasks: list[TaskRecord], learn: list[TaskRecord], test: list[TaskRecord]
) -> tuple[str, dict[str, Any]]:
    """The up-front spend estimate, said before any model call of the learning stages: calls
    per stage, priced per member from what earlier calls and nights measured, and whether
    the budget will cut the night short."""
    cfg = night.cfg
    rubric = sum(t.reference_kind is ReferenceKind.RUBRIC for t in tasks) / len(tasks)
    estimate = estimate_spend(n_learn=len(learn), n_test=len(test), cfg=cfg, rubric_share=rubric)
    model = TokenModel.load(project_dir(cfg.state_path(), night.project))
    model.observe(night.spend.usage_by_member)  # tonight's calls so far (mining) count too
    priced = estimate_tokens(model, cfg.pool, estimate.by_stage, rubric_share=rubric)
    estimate = replace(estimate, tokens=priced.tokens)
    said = estimate.describe() + (f"; per call: {priced.describe()}" if priced.sources else "")
    night.progress.note(f"estimated spend: {said}")
    warning = budget_warning(
        calls=estimate.calls,
        tokens=estimate.tokens,
        max_calls=cfg.budget.max_calls,
        max_tokens=cfg.budget.max_tokens,
    )
    if warning:
        night.notes.append(warning)
        night.progress.note(warning)
    _log().info("night.estimate", calls=estimate.calls, tokens=estimate.tokens,
                per_call=priced.per_call, sources=priced.sources)  # fmt: skip
    detail = {"calls": estimate.calls, **priced.to_dict(), "budget_warning": warning}
    return said, detail


def _learn_tokens(night: Night) -> None:
    """Fold tonight's measured tokens per call into the project's token model."""
    where = project_dir(night.cfg.state_path(), night.project)
    model = TokenModel.load(where)
    model.observe(night.spend.usage_by_member)
    try:
        model.save(where)
    except OSError as exc:  # a cache of averages: never sinks the night
        _log().warning("token_model.save_failed", error=str(exc))


def _conclude(night: Night, course: Course, live: Live, night_no: int) -> None:
    """Stage an accepted night's documents (not a dry run), then auto-adopt if configured."""
    decision = course.decision
    staged_skills = bool(course.fanout and course.fanout.any_accepted)
    if not (course.committed and (course.accepted or staged_skills) and not night.dry_run
            and decision):  # fmt: skip
        return
    if (night.run.path / RECEIPTS_NAME).exists():
        # Staged and adopted before a kill: the proposal stands as it was adopted.
        course.proposal_dir = night.run.path / "proposal"
        return
    night.begin("stage")
    try:
        course.proposal_dir = _stage(night, live, decision, night_no, course.fanout)
    except (RefusedError, SkillOptError, OSError) as exc:
        course.fail("stage", str(exc))
        course.staging_failed = True
        night.end("stage", status="failed")
        return
    night.end("stage")
    if night.cfg.auto_adopt:
        course.adopted = _auto_adopt(night)


def _report(
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
        "gate_mode": night.cfg.gate.mode,
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
        **(course.fanout.report() if course.fanout else {}),
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


def _history_entry(
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


def _outcome(night: Night, course: Course, report: dict[str, Any]) -> NightOutcome:
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


def _retain(night: Night) -> None:
    """Delete old run directories the retention policy does not keep (never tonight's,
    never one a proposal, an adoption, the skill store or a resume needs)."""
    policy = night.cfg.retention
    try:
        apply_retention(
            night.run.path.parent,
            project_dir(night.cfg.state_path(), night.project),
            keep_last=policy.keep_last,
            keep_adopted=policy.keep_adopted,
            current=night.run.path,
        )
    except OSError as exc:  # housekeeping must not sink a finished night
        _log().warning("retention.failed", error=str(exc))


def _auto_adopt(night: Night) -> list[str]:
    """Adopt the proposal when configured; a refusal is a note, never a lost night."""
    from skillopt_sleep.adopt import adopt

    roots = [str(r) for r in night.cfg.adopt_roots(night.project)]
    try:
        entries = load_manifest(night.run.path).entries
        # per-skill proposals only when asked for by name: auto_adopt = "all"
        select = [e.name for e in entries if night.cfg.auto_adopt == "all" or not e.fanout]
        if not select:
            return []
        result = adopt(night.run.path, skill_roots=roots, select=select)
    except SkillOptError as exc:
        night.notes.append(f"auto-adopt refused: {exc}")
        return []
    paths = [a.live_path for a in result.adopted]
    night.notes.append(f"auto-adopted: {', '.join(paths)}")
    return paths


def _final_deltas(night: Night) -> list[dict[str, Any]]:
    for trial in reversed(night.trials):
        if trial.decision is not None and trial.kind in ("final", "union"):
            return [d.to_dict() for d in trial.decision.task_deltas]
    return []


def _stage(
    night: Night, live: Live, decision: Decision, night_no: int, fanout: Fanout | None = None
) -> Path:
    """Version the accepted documents and write the proposal (manifest last)."""
    run = night.run
    for path, pinned in ((live.skill_path, live.skill_sha), (live.memory_path, live.memory_sha)):
        if sha256_file(path) != pinned:
            raise RefusedError(
                f"{path}: the live file changed while the night ran; nothing was staged "
                "(run the night again)"
            )
    store = SkillStore(project_dir(night.cfg.state_path(), night.project))
    proposals = []
    skill = staged_text(live.skill, decision.docs.skill)
    memory = staged_text(live.memory, decision.docs.memory)
    if skill != live.skill:
        name = live.skill_path.parent.name or "skill"
        text = scaffold_skill(skill, name=name, project=night.project)
        version = store.add_version(name, text, run_id=run.run_id, night=night_no)
        run.journal["versions"][name] = version.number
        proposals.append(
            Proposal(
                name=name,
                live_path=live.skill_path,
                text=text,
                kind=ProposalKind.SKILL,
                live_sha256=live.skill_sha,
                store_version=version.number,
            )
        )
    if memory != live.memory:
        proposals.append(
            Proposal(
                name=live.memory_path.stem or "memory",
                live_path=live.memory_path,
                text=memory,
                kind=ProposalKind.MEMORY,
                live_sha256=live.memory_sha,
            )
        )
    for proposal in fanout.proposals(store, run_id=run.run_id, night_no=night_no) if fanout else ():
        run.journal["versions"][proposal.name] = proposal.store_version
        proposals.append(proposal)
    write_proposal(run.path, proposals, run_id=run.run_id)
    run.save()
    return run.path / "proposal"


def _write_outputs(night: Night, report: dict[str, Any], gathered: Gathered | None) -> None:
    run = night.run
    run.write_json(rundir.TRIALS, {"trials": report.get("trials", [])})
    diagnostics = {
        "run_id": run.run_id,
        "status": report.get("status"),
        "failed_stage": report.get("failed_stage"),
        "reason": report.get("reason"),
        "pool": _safe_accounting(night),
        "spend": night.spend.summary(),
        "rollout_errors": night.replayer.errors.to_list(),
        "reflect": {k: v.to_dict() for k, v in night.reflections.items()},
        "no_edit_reasons": night.no_edit_reasons,
        "gather": gathered.diagnostics if gathered else {},
        "reused_rollouts": night.replayer.reused,
    }
    patience = current_patience()
    if patience is not None:
        diagnostics["outage_patience"] = patience.to_dict()
    run.write_json(rundir.DIAGNOSTICS, diagnostics)
    run.write_json(rundir.REPORT_JSON, report)
    run.write_text(rundir.REPORT_MD, render_markdown(report))
    publish_night(run.path)  # report.html + the index across nights; never raises


def _safe_accounting(night: Night) -> dict[str, Any]:
    try:
        return night.spend.accounting()
    except Exception as exc:  # diagnostics must not sink the night
        return {"error": f"{type(exc).__name__}: {exc}"}
