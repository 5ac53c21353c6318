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
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

from skillopt.errors import BudgetExceededError, RefusedError, SkillOptError
from skillopt.logging import get_logger
from skillopt.types import ReferenceKind, TaskRecord
from skillopt_sleep import rundir
from skillopt_sleep.consolidate import (
    Decision,
    Night,
    consolidate,
    estimate_spend,
    split_tasks,
)
from skillopt_sleep.gather import Gathered, gather_async, harvest_window_start, uses_llm_miner
from skillopt_sleep.outcome import Live, NightFailed, NightOutcome, NightResult, read_live
from skillopt_sleep.replay import Docs
from skillopt_sleep.report import render_markdown
from skillopt_sleep.rundir import RunStatus, iso
from skillopt_sleep.staging import (
    Proposal,
    ProposalKind,
    SkillStore,
    sha256_file,
    write_proposal,
)
from skillopt_sleep.state import NightEntry, NightStatus, ProjectState, StateStore, project_dir


def _log() -> Any:
    """Looked up per call, so the logging config set by the CLI applies."""
    return get_logger("skillopt_sleep.night")


def _live(night: Night) -> Live:
    skill_path = night.cfg.live_skill_path()
    memory_path = night.cfg.live_memory_path(night.project)
    skill, skill_sha = read_live(skill_path)
    memory, memory_sha = read_live(memory_path)
    return Live(
        skill_path=skill_path,
        memory_path=memory_path,
        skill=skill,
        memory=memory,
        skill_sha=skill_sha,
        memory_sha=memory_sha,
    )


async def _gather(
    night: Night, state: ProjectState, started: datetime, tasks_file: Path | None
) -> Gathered:
    run = night.run
    if night.resumed and run.stage_done("harvest"):
        rows = run.read_tasks()
        info = run.journal["checkpoint"].get("gather", {})
        return Gathered(
            tasks=tuple(TaskRecord.from_dict(r) for r in rows),
            n_sessions=int(info.get("n_sessions", 0)),
            source=str(info.get("source", "transcripts")),
            diagnostics=dict(info.get("diagnostics", {})),
        )
    night.begin("harvest")
    since = harvest_window_start(night.cfg, state.harvest_cursor, started)
    gathered = await gather_async(
        night.cfg,
        project=night.project,
        since=since,
        pool=night.spend,
        use_llm=uses_llm_miner(night.cfg),
        tasks_file=tasks_file,
    )
    run.write_tasks(t.to_dict() for t in gathered.tasks)
    run.checkpoint(
        "gather",
        {
            "n_sessions": gathered.n_sessions,
            "source": gathered.source,
            "diagnostics": gathered.diagnostics,
            "since": iso(since) if since else None,
        },
    )
    night.end("harvest", tasks=len(gathered.tasks), sessions=gathered.n_sessions)
    return gathered


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


def _chart(state: ProjectState, night_no: int, score: float | None) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    for entry in state.history[-14:]:
        if entry.night == night_no:
            continue
        value = entry.candidate if entry.accepted else entry.baseline
        points.append({"night": entry.night, "score": value, "label": entry.status.value})
    points.append({"night": night_no, "score": score, "label": "← tonight"})
    return points


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


async def drive(night: Night, *, tasks_file: Path | None, demo: bool) -> NightOutcome:
    cfg, run = night.cfg, night.run
    store = StateStore(cfg.state_path())
    state = store.load(night.project)
    started = datetime.fromisoformat(str(run.journal["started_at"]).replace("Z", "+00:00"))
    night_no = int(run.journal.get("night") or 0)
    if not night_no:
        state, night_no = state.begin_night()
        run.journal["night"] = night_no
        run.save()
    if night.resumed:
        night.replayer.preload(run.read_rollouts())
    live = _live(night)
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
        "metric": cfg.gate.metric,
        "live_skill": str(live.skill_path),
        "live_memory": str(live.memory_path),
        "resumed": night.resumed,
    }
    status, result = RunStatus.COMPLETE, NightResult.REJECTED
    reason = failed_stage = ""
    decision: Decision | None = None
    gathered: Gathered | None = None
    leaked = False
    try:
        gathered = await _gather(night, state, started, tasks_file)
        tasks = list(gathered.tasks)
        train, val, test, leaked = split_tasks(tasks)
        report["tasks"] = {
            "total": len(tasks),
            "train": len({t.id for t in train}),
            "val": len({t.id for t in val}),
            "test": len(test),
            "source": gathered.source,
        }
        report["task_intents"] = {t.id: t.intent for t in tasks}
        report["n_sessions"] = gathered.n_sessions
        if not tasks:
            result = NightResult.NO_TASKS
        else:
            night.gate = night.gate.with_ids([t.id for t in train], [t.id for t in val])
            rubric = sum(t.reference_kind is ReferenceKind.RUBRIC for t in tasks) / len(tasks)
            estimate = estimate_spend(
                n_train=len(train), n_val=len(val), n_test=len(test), cfg=cfg, rubric_share=rubric
            )
            report["estimate"] = estimate.describe()
            night.progress.note(f"estimated spend: {estimate.describe()}")
            cap = cfg.budget.max_calls
            if cap and estimate.calls > cap:
                night.notes.append(
                    f"the estimate ({estimate.calls} calls) is above the cap ({cap}); "
                    "the night may stop early"
                )
                night.progress.note(night.notes[-1])
            _log().info("night.estimate", calls=estimate.calls, tokens=estimate.tokens)
            start = Docs(skill=live.skill, memory=live.memory)
            decision = await consolidate(night, train=train, val=val, start=start)
            report["test"] = await _score_test(night, test, decision, start)
            if decision.accepted:
                result = NightResult.ACCEPTED
            elif not decision.applied and not any(t.applied for t in night.trials):
                result = NightResult.NO_EDITS if not night.trials else NightResult.REJECTED
    except NightFailed as exc:
        status, result, reason, failed_stage = (
            RunStatus.FAILED, NightResult.FAILED, exc.cause, exc.stage,
        )  # fmt: skip
    except BudgetExceededError as exc:
        result = NightResult.BUDGET_REACHED
        reason = f"night budget reached during {exc}"
        night.notes.append(reason)
    except RefusedError as exc:
        status, result, reason, failed_stage = (
            RunStatus.FAILED, NightResult.FAILED, str(exc), "stage",
        )  # fmt: skip
    except BaseException as exc:
        # Interrupted (Ctrl-C, SIGTERM cancellation) or a bug: keep the run resumable.
        run.journal["resumable"] = True
        why = "interrupted" if not isinstance(exc, Exception) else f"{type(exc).__name__}: {exc}"
        run.finish(RunStatus.ABORTED, night.clock(), outcome="aborted", reason=why)
        raise

    proposal_dir: Path | None = None
    accepted = bool(decision and decision.accepted)
    if status is RunStatus.COMPLETE and accepted and not night.dry_run and decision is not None:
        try:
            proposal_dir = _stage(night, live, decision, night_no)
        except (RefusedError, SkillOptError, OSError) as exc:
            status, result, reason, failed_stage = (
                RunStatus.FAILED, NightResult.FAILED, str(exc), "stage",
            )  # fmt: skip
            accepted = False
    adopted: list[str] = []
    if proposal_dir is not None and cfg.auto_adopt:
        adopted = _auto_adopt(night, live)
    ended = night.clock()
    score = None
    if decision is not None:
        score = decision.candidate if accepted else decision.baseline
    report.update(
        status=status.value,
        result=result.value,
        reason=reason,
        failed_stage=failed_stage,
        ended_at=iso(ended),
        accepted=accepted,
        gate_action=decision.action if decision else "",
        baseline=_finite(decision.baseline) if decision else None,
        candidate=_finite(decision.candidate) if decision else None,
        leaked=leaked,
        proposal_dir=str(proposal_dir) if proposal_dir else None,
        accepted_edits=[e.to_dict() for e in decision.applied] if decision and accepted else [],
        rejected_edits=[e.to_dict() for e in decision.rejected] if decision else [],
        unmatched_edits=[
            e.to_dict() for t in night.trials if t.kind == "trial" for e in t.unmatched
        ],
        proposed_edits=[e.to_dict() for t in night.trials if t.kind == "trial" for e in t.edits],
        no_edit_reasons=night.no_edit_reasons,
        trials=[t.to_dict() for t in night.trials],
        task_deltas=_final_deltas(night),
        notes=night.notes,
        spend=night.spend.summary(),
        reused_rollouts=night.replayer.reused,
        chart=_chart(state, night_no, score),
        auto_adopted=adopted,
    )
    _write_outputs(night, report, gathered)
    if status is RunStatus.COMPLETE and not night.dry_run:
        entry = NightEntry(
            night=night_no,
            run_id=run.run_id,
            started_at=started,
            status=NightStatus.NO_TASKS if result is NightResult.NO_TASKS else NightStatus.COMPLETE,
            accepted=accepted,
            baseline=report["baseline"],
            candidate=report["candidate"],
            n_tasks=len(gathered.tasks) if gathered else 0,
            run_dir=str(run.path),
        )
        state = state.with_cursor(started).record_night(entry)
        if gathered:
            state = state.archive_tasks(gathered.tasks)
        store.save(state)
    run.finish(status, ended, outcome=result.value, reason=reason, failed_stage=failed_stage)
    if result is NightResult.NO_TASKS:
        _prune_empty_nights(night)
    night.progress.close()  # the last stage's line comes before the night's
    _log().info(
        "night.done",
        run_id=run.run_id,
        status=status.value,
        result=result.value,
        accepted=accepted,
        baseline=report["baseline"],
        candidate=report["candidate"],
        calls=night.spend.calls,
    )
    return NightOutcome(
        status=status,
        result=result,
        run_id=run.run_id,
        run_dir=run.path,
        report_path=run.path / rundir.REPORT_MD,
        proposal_dir=proposal_dir,
        accepted=accepted,
        gate_action=report["gate_action"],
        baseline=report["baseline"],
        candidate=report["candidate"],
        test_score=(report.get("test") or {}).get("score"),
        n_sessions=report.get("n_sessions", 0),
        n_tasks=(report.get("tasks") or {}).get("total", 0),
        reason=reason,
        failed_stage=failed_stage,
        resumed=night.resumed,
        dry_run=night.dry_run,
        spend=night.spend.summary(),
    )


def _prune_empty_nights(night: Night) -> None:
    """Delete earlier no-task runs of this project: they hold only harvest diagnostics, and a
    quiet project would otherwise gain one directory a night. The newest one is kept."""
    for path in rundir.RunDir.list_runs(night.run.path.parent):
        if path == night.run.path:
            continue
        try:
            journal = rundir.RunDir.open(path).journal
        except SkillOptError:
            continue
        if journal.get("status") == RunStatus.COMPLETE.value and journal.get("outcome") == (
            NightResult.NO_TASKS.value
        ):
            shutil.rmtree(path, ignore_errors=True)


def _auto_adopt(night: Night, live: Live) -> list[str]:
    """Adopt the proposal when configured; a refusal is a note, never a lost night."""
    from skillopt_sleep.adopt import adopt

    roots = [*night.cfg.resolved_skill_roots(), live.memory_path.parent]
    try:
        result = adopt(night.run.path, skill_roots=[str(r) for r in roots])
    except SkillOptError as exc:
        night.notes.append(f"auto-adopt refused: {exc}")
        return []
    paths = [a.live_path for a in result.adopted]
    night.notes.append(f"auto-adopted: {', '.join(paths)}")
    return paths


def _final_deltas(night: Night) -> list[dict[str, Any]]:
    for trial in reversed(night.trials):
        if trial.decision is not None and trial.kind in ("final", "trial"):
            return [d.to_dict() for d in trial.decision.task_deltas]
    return []


def _stage(night: Night, live: Live, decision: Decision, night_no: int) -> Path:
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
    if decision.docs.skill != live.skill:
        name = live.skill_path.parent.name or "skill"
        version = store.add_version(name, decision.docs.skill, run_id=run.run_id, night=night_no)
        run.journal["versions"][name] = version.number
        proposals.append(
            Proposal(
                name=name,
                live_path=live.skill_path,
                text=decision.docs.skill,
                kind=ProposalKind.SKILL,
                live_sha256=live.skill_sha,
                store_version=version.number,
            )
        )
    if decision.docs.memory != live.memory:
        proposals.append(
            Proposal(
                name=live.memory_path.stem or "memory",
                live_path=live.memory_path,
                text=decision.docs.memory,
                kind=ProposalKind.MEMORY,
                live_sha256=live.memory_sha,
            )
        )
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
    run.write_json(rundir.DIAGNOSTICS, diagnostics)
    run.write_json(rundir.REPORT_JSON, report)
    run.write_text(rundir.REPORT_MD, render_markdown(report))


def _safe_accounting(night: Night) -> dict[str, Any]:
    try:
        return night.spend.accounting()
    except Exception as exc:  # diagnostics must not sink the night
        return {"error": f"{type(exc).__name__}: {exc}"}
