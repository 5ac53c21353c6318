"""The night as its list of stages: :func:`drive`, called by :func:`.entry.run_night` once the
run directory, the stack and the progress display exist.

A walk through one night's stages (:func:`_drive`):

1. **Number** the night (:func:`_number`: reserved in the project state before the journal
   records it, kept by a resumed night).
2. **Open the documents** (:func:`_open_documents`): a resumed night preloads every rollout
   already judged; the live documents are read, pinned for staging, older region markers
   migrated.
3. **Learn** (:func:`_learn`): gather tonight's tasks (:mod:`.gather_tasks`), announce the
   spend estimate (:mod:`.estimate`), consolidate (:mod:`.learn.rounds`), score the test split.
   How a stage failed goes into the :class:`.course.Course`, never out as an exception
   (but an interruption, which marks the run aborted and resumable).
4. **Stage** (:func:`.proposal.conclude`): an accepted night's proposal, then auto-adopt.
5. **Report** (:func:`.report.build_report`), then **commit** (:func:`_commit`): a complete
   real night's archive (:mod:`.archive_exchange`), the files every night leaves (:mod:`.outputs`),
   the project state.
6. **Finish** (:func:`_finish`): the journal says how the night ended; retention.

It always leaves ``run.json``, ``trials.json``, ``diagnostics.json``, ``report.json`` and
``report.md`` behind. The proposal and the skill store are written only for a complete,
accepted, non-dry night; state (harvest cursor, night history) only for a complete non-dry
night.
"""

from __future__ import annotations

import functools
from datetime import datetime
from pathlib import Path

from skillopt.backends.patience import Patience, current_patience, patience_for
from skillopt.errors import (
    BudgetExceededError,
    RefusedError,
    RunFailedError,
    SkillOptError,
    WaitingForAnswersError,
)
from skillopt.logging import get_logger
from skillopt.redact import secret_kinds
from skillopt.skilldoc import learned_bullets
from skillopt.types import Split, TaskRecord
from skillopt_sleep.model_change import model_advisory, model_key
from skillopt_sleep.night.archive_exchange import carried_edits, commit_archive, revive_for_models
from skillopt_sleep.night.course import Course, TestScore
from skillopt_sleep.night.estimate import announce_estimate, announce_mining, learn_tokens
from skillopt_sleep.night.estimate_revision import revise_on_edits, revise_on_noise
from skillopt_sleep.night.gather_tasks import Gathered, gather_night, uses_llm_miner
from skillopt_sleep.night.learn.decision import Decision
from skillopt_sleep.night.learn.rounds import consolidate
from skillopt_sleep.night.line_removals import removal_candidates
from skillopt_sleep.night.live import read_documents
from skillopt_sleep.night.night_state import Night
from skillopt_sleep.night.outcome import Live, NightOutcome, NightResult
from skillopt_sleep.night.outputs import write_outputs
from skillopt_sleep.night.proposal import conclude
from skillopt_sleep.night.quiet.recorded import QuietPlan, plan_quiet, settle_quiet, top_up_staged
from skillopt_sleep.night.report import NightReport, build_report, history_entry, night_outcome
from skillopt_sleep.night.restore import propose_restore
from skillopt_sleep.night.skills.fanout import Fanout
from skillopt_sleep.night.skills.shared import fold_in, share_memory
from skillopt_sleep.night_progress import ProgressCompleter
from skillopt_sleep.replay import Docs, spent_pair
from skillopt_sleep.retention import apply_retention
from skillopt_sleep.rundir import RunStatus
from skillopt_sleep.state import ProjectState, StateStore, project_dir
from skillopt_sleep.tasks.archive import TaskArchive, archive_path, open_archive

__all__ = ["drive"]

_log = get_logger(__name__)


async def drive(night: Night, *, tasks_file: Path | None, demo: bool) -> NightOutcome:
    started = datetime.fromisoformat(night.run.journal.started_at.replace("Z", "+00:00"))
    path = archive_path(project_dir(night.cfg.state_path(), night.project))
    try:
        archive = open_archive(path, now=started)
    except SkillOptError as exc:
        _record_end(night, RunStatus.FAILED, outcome="failed", reason=str(exc),
                    failed_stage="harvest")  # fmt: skip
        raise
    patience = Patience(
        night.cfg.budget.outage_patience_seconds, wait_when_refused=not night.foreground
    )
    with archive, patience_for(patience):
        night.archive = archive
        try:
            return await _drive(night, archive, tasks_file=tasks_file, demo=demo)
        finally:
            night.archive = None


async def _drive(
    night: Night, archive: TaskArchive, *, tasks_file: Path | None, demo: bool
) -> NightOutcome:
    """The night as its list of stages; every way it can end becomes a NightOutcome."""
    store = StateStore(night.cfg.state_path())
    state, night_no = _number(night, store)
    models = model_key(night.cfg.pool)
    _warn_model_change(night, state.last_model_key, models)
    live = _open_documents(night)
    course = Course()
    await _learn(night, archive, course, live, night_no, tasks_file)
    _note_patience(night)
    staged = conclude(night, course, live, night_no)
    if staged is not None:
        course.staged(staged)
    ended = night.clock()
    report = build_report(night, course, state, live, night_no=night_no, ended=ended, demo=demo)
    report = report.model_copy(update={
        "models": models,
        "advisories": tuple(a for a in [model_advisory(state.last_model_key, models)] if a),
    })  # fmt: skip
    report = _commit(night, archive, store, state, course, report, live=live, ended=ended)
    _finish(night, course, report, ended)
    return night_outcome(night, course, report)


def _recount_pending(archive: TaskArchive, gathered: Gathered, *, night_no: int) -> None:
    """A night that keeps nothing consumed no session: the archive's pending count (what
    ``status`` says) becomes what its report says, every session it read included."""
    if gathered.source != "transcripts":
        return
    archive.recount_pending(
        backlog=gathered.pending(consumed=False),
        outside_window=gathered.outside_window,
        by=f"night {night_no}, which kept nothing",
    )


def _open_documents(night: Night) -> Live:
    """A resumed night's judged rollouts preloaded; the live documents read (and pinned)."""
    if night.resumed:
        night.replayer.preload(night.run.read_rollouts())
    live = _live(night)
    _warn_withheld(night, live)
    night.live = live  # each later stage checks the files still hold what was read
    return live


def _commit(
    night: Night,
    archive: TaskArchive,
    store: StateStore,
    state: ProjectState,
    course: Course,
    report: NightReport,
    *,
    live: Live,
    ended: datetime,
) -> NightReport:
    """Commit a complete real night (the archive, then the outputs, then the project state:
    a night killed in between resumes and commits once) and write the files every night
    leaves; the report gains what the archive did."""
    keep = course.committed and not night.dry_run
    if keep:
        night.begin("commit")
    changes = None
    if keep and course.gathered is not None:
        changes = commit_archive(
            night, archive, course.gathered, course.decision, course.carried_ids,
            night_no=report.night, now=ended,
            docs_hash=Docs(skill=live.skill, memory=live.memory).key,
            learned=[*learned_bullets(live.skill), *learned_bullets(live.memory)],
            fanout=course.fanout,
        )  # fmt: skip
    elif not night.dry_run and course.gathered is not None:
        _recount_pending(archive, course.gathered, night_no=report.night)
    report = report.model_copy(
        update={"archive_changes": changes, "archive": archive.stats().to_dict()}
    )
    write_outputs(night, report, course.gathered)
    learn_tokens(night, course)
    if keep:
        kept = state.record_night(history_entry(night, course, report))
        store.save(kept.with_model_key(report.models) if report.models else kept)
        night.end_after_decision("commit")
    return report


def _finish(night: Night, course: Course, report: NightReport, ended: datetime) -> None:
    """The journal says how the night ended; old run directories are let go."""
    night.run.finish(
        course.status, ended, outcome=course.result.value, reason=course.reason,
        failed_stage=course.failed_stage,
    )  # fmt: skip
    _retain(night)
    night.progress.close()  # the last stage's line comes before the night's
    _log.info(
        "night.done", run_id=night.run.run_id, status=course.status.value,
        result=course.result.value, accepted=course.accepted, baseline=report.baseline,
        candidate=report.candidate, calls=night.spend.calls,
    )  # fmt: skip


def _record_end(night: Night, status: RunStatus, **how: str) -> None:
    """Record in ``run.json`` how a night that is raising ended. When that write fails too
    (the disk that failed the night is still full), the night's own error is the one the
    user sees: this one is logged, and ``run.json`` still says running (a resume finds it)."""
    try:
        night.run.finish(status, night.clock(), **how)
    except OSError as exc:
        _log.warning("night.end_not_recorded", status=status.value, error=str(exc))


async def _learn_gathered(
    night: Night, archive: TaskArchive, course: Course, live: Live, night_no: int
) -> None:
    """Learn from what :func:`_gather` gathered (``course.gathered``): the quiet plan or the
    estimate, a restore, the shared memory step, the managed night with the project's
    skills, the test split, the staged documents' samples topped up."""
    assert course.gathered is not None
    tasks = list(course.gathered.tasks)
    learn = [t for t in tasks if t.split is not Split.TEST]
    test = [t for t in tasks if t.split is Split.TEST]
    if not learn:
        course.result = NightResult.NO_TASKS
        course.reason = course.gathered.why_nothing or (
            f"the {len(test)} task(s) gathered are all held out for the test split "
            "(night.test_fraction): none is left to learn from"
        )
        return
    fan = course.fanout = Fanout.plan(night, learn, memory=live.memory, night_no=night_no)
    start = Docs(skill=live.skill, memory=live.memory)
    if await _quiet_or_estimate(night, course, fan, tasks, start):
        return
    said = course.estimate
    assert said is not None  # a night that was not quiet said its estimate
    night.noise.on_first_rollouts = lambda noise: revise_on_noise(night, said, noise)
    night.learning.on_proposed = functools.partial(revise_on_edits, night, said)
    restored = None if fan.learning() else await propose_restore(night, learn, live)
    if restored is not None:  # the adopted version does worse: its restore is staged
        course.decision, course.result = restored, NightResult.ACCEPTED
        course.test = await _score_test(night, test, restored, start)
        return
    carried, course.carried_ids = carried_edits(archive)
    carried = [*removal_candidates(night), *carried]
    shared = await share_memory(night, fan, start, rotation=night_no)
    night.replayer.done.update(shared.answers)  # the managed night's first rollouts
    begin = Docs(skill=start.skill, memory=shared.memory)
    course.decision = await fan.alongside(
        lambda tasks: consolidate(
            night.learning, tasks=tasks, start=begin, rotation=night_no, carried=carried
        ),
        begin,
    )
    course.decision = fan.whole_night(fold_in(shared, course.decision, start))
    course.test = await _score_test(night, test, course.decision, start)
    night.check_waiting(night.stage)  # a project skill's prompts may wait too
    await top_up_staged(
        night, fan.asked_after(tasks, course.decision), [course.decision, *fan.decisions()],
        rows=fan.rollout_rows(),
    )  # fmt: skip
    _set_result(night, course, fan)


async def _learn(
    night: Night,
    archive: TaskArchive,
    course: Course,
    live: Live,
    night_no: int,
    tasks_file: Path | None,
) -> None:
    """Gather, learn, score the test split; how a stage failed goes into ``course``."""
    started = datetime.fromisoformat(night.run.journal.started_at.replace("Z", "+00:00"))
    try:
        course.gathered = await _gather(night, archive, started, tasks_file)
        await _learn_gathered(night, archive, course, live, night_no)
    except WaitingForAnswersError as exc:
        course.wait(exc.stage, f"{exc}; answer them, then run the same command again")
        night.run.update(resumable=True)
        night.notes.append(course.reason)
    except RunFailedError as exc:
        course.fail(exc.stage, exc.cause)
        # An outage: the next night resumes this one and pays only for what never answered.
        night.run.update(resumable=True)
    except BudgetExceededError as exc:
        course.result = NightResult.BUDGET_REACHED
        decided = course.decision is not None and course.decision.accepted
        course.reason = f"{exc}; the night stopped during {night.stage}" + (
            ", after its decision" if decided else ", before any decision"
        )
        night.notes.append(course.reason)
    except RefusedError as exc:
        course.fail("stage", str(exc))
    except BaseException as exc:
        # Interrupted (Ctrl-C, SIGTERM cancellation) or a bug: keep the run resumable.
        # what this attempt paid, for the logs
        night.run.update(resumable=True, spend=night.spend.summary())
        why = "interrupted" if not isinstance(exc, Exception) else f"{type(exc).__name__}: {exc}"
        _record_end(night, RunStatus.ABORTED, outcome="aborted", reason=why)
        raise


async def _quiet_or_estimate(
    night: Night, course: Course, fan: Fanout, tasks: list[TaskRecord], start: Docs
) -> bool:
    """Whether the night ended quiet (:mod:`.quiet.recorded`); its spend estimate is said before
    any call: the quiet night's few samples (the re-check's, the drift check's) while it
    may be quiet, the learning night's once it is not."""
    plan = plan_quiet(night, fan.asked(tasks, start))
    test = [t for t in tasks if t.split is Split.TEST]

    def say(samples: int) -> None:
        course.estimate = announce_estimate(
            night, tasks, fan.managed_tasks, test, docs=start, skills=fan.learning(),
            recheck=samples,
        )  # fmt: skip

    if plan is not None:
        if plan.recheck or plan.drift:  # the quiet night's only calls
            say(len(plan.recheck) + len(plan.drift))
        if await _quiet(night, course, plan):
            return True
    say(0)  # a learning night (a re-sampled task failed, or the records never sufficed)
    return False


def _set_result(night: Night, course: Course, fan: Fanout) -> None:
    """How a night that ran its learning ended, from its decision (left as it is when it
    neither staged nor had nothing to learn: rejected)."""
    decision = course.decision
    assert decision is not None
    if decision.budget_stop:  # the best gated documents are staged all the same
        course.result, course.reason = NightResult.BUDGET_REACHED, decision.budget_stop
    elif decision.accepted or fan.any_accepted:
        course.result = NightResult.ACCEPTED
    elif decision.nothing_to_learn or not any(t.applied for t in night.trials):
        course.result = NightResult.NO_EDITS


async def _quiet(night: Night, course: Course, plan: QuietPlan) -> bool:
    """End a quiet night right after harvest (see :mod:`.quiet.recorded`): its decision and test
    score come from the archive's records, its one line says so."""
    assert course.gathered is not None
    quiet = await settle_quiet(night, plan, new_sessions=course.gathered.n_sessions)
    if quiet is None:
        return False
    course.result, course.reason = NightResult.NO_EDITS, quiet.line
    course.decision = quiet.decision
    if course.fanout is not None:
        course.fanout.settle_quiet(quiet)
        course.decision = course.fanout.whole_night(quiet.decision)
    test = [t.id for t in course.gathered.tasks if t.split is Split.TEST]
    if test:
        scores = [quiet.decision.start_scores[t] for t in test]
        course.test = TestScore(n=len(test), score=sum(scores) / len(scores), before=None)
    night.no_edit_reasons.append(quiet.line)
    night.progress.note(quiet.line)
    _log.info(
        "night.quiet", tasks=len(plan.live), rechecked=len(plan.recheck), drift=len(plan.drift)
    )
    return True


def _live(night: Night) -> Live:
    """The live documents as the night reads them (:func:`.live.read_documents`); what was
    done to them (older markers migrated, a first seed from the shared skill) is noted once."""
    live, notes = read_documents(
        night.cfg, night.project, run_id=night.run.run_id, now=night.clock(),
        record=not night.dry_run,
    )  # fmt: skip
    for note in notes:
        if note not in night.notes:
            night.notes.append(note)
            night.progress.note(note)
    return live


async def _gather(
    night: Night, archive: TaskArchive, started: datetime, tasks_file: Path | None
) -> Gathered:
    """Pending sessions mined (cached per session) plus recalled archive tasks; a resumed
    night reads back exactly what it gathered, so it commits what the original would."""
    run = night.run
    if night.resumed and run.stage_done("harvest"):
        rows = run.read_tasks()
        info = run.journal.checkpoint.get("gather", {})
        night.spend.carry(*spent_pair(info.get("spent")))  # the night's budget counts its mining
        return Gathered.restore([TaskRecord.from_dict(r) for r in rows], info)
    night.begin("harvest")
    revive_for_models(night, archive)
    before = night.spend.calls, night.spend.tokens
    gathered = await gather_night(
        night.cfg,
        project=night.project,
        archive=archive,
        pool=ProgressCompleter(night.spend, night.progress),  # mining calls on the display
        use_llm=uses_llm_miner(night.cfg),
        now=started,
        tasks_file=tasks_file,
        clock=night.clock,
        before_mining=lambda calls: announce_mining(night, calls),
    )
    night.sessions_mined = gathered.n_sessions if uses_llm_miner(night.cfg) else 0
    night.check_waiting("harvest")  # tasks mined from a missing reply are never saved
    run.write_tasks(t.to_dict() for t in gathered.tasks)
    spent = [night.spend.calls - before[0], night.spend.tokens - before[1]]
    run.checkpoint("gather", {**gathered.checkpoint(), "spent": spent})
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


async def _score_test(
    night: Night, test: list[TaskRecord], decision: Decision, start: Docs
) -> TestScore | None:
    """The test split, never seen by reflection or the gate, scored after the decision."""
    if not test:
        return None
    night.begin("test")
    after = await night.measure(test, decision.docs, "test")
    before = None
    if decision.accepted:
        before = night.mean_score(await night.measure(test, start, "test"))
    night.end("test")
    return TestScore(n=len(test), score=night.mean_score(after), before=before)


def _number(night: Night, store: StateStore) -> tuple[ProjectState, int]:
    """Tonight's number: reserved once, kept by a resumed night.

    A real night's number is saved in the project state before the run journal records
    it, so a run killed at any point never hands its number to a later night (a run that
    is never resumed leaves a gap, never a duplicate). A dry run borrows the next number
    without reserving it.
    """
    state = store.load(night.project)
    night_no = night.run.journal.night or 0
    if not night_no:
        reserved, night_no = state.begin_night()
        if not night.dry_run:
            state = reserved
            store.save(state)
        night.run.update(night=night_no)
        night.run.save()
    return state, night_no


def _warn_model_change(night: Night, previous: str, current: str) -> None:
    """Tonight's scores are not comparable with the last night's: say so (log, display);
    the report carries it as an advisory."""
    advisory = model_advisory(previous, current)
    if advisory:
        night.progress.note(advisory)
        _log.warning("night.model_changed", previous=previous, current=current)


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
    _log.warning("night.secret_in_live_document", documents=found)


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
        _log.warning("retention.failed", error=str(exc))
