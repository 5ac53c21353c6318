"""One night, end to end: :func:`run_night` (the entry point the CLI and the daemon call).

::

    harvest+mine+split -> [val baseline | train rollouts x K] (concurrent, judged as they land)
      -> for each round: reflect(skill) -> trial -> [attribution] -> rollouts -> reflect(memory)
         -> trial (hill-climbing: each trial is measured against the best candidate so far)
      -> final FRESH replay on val vs the original baseline (core gate) -> test split
      -> stage (report, proposal, versions) -> [auto-adopt] -> save state

Resume: every judged rollout is appended to ``rollouts.jsonl`` and every reflect result is
checkpointed in ``run.json``. A killed night is re-run by the next ``once`` with the same
tasks; work already done is replayed from the checkpoints without a model call, so it
reaches the same decision. A night that cannot be resumed is marked ``aborted``.

The live skill and memory files are only read; staging writes a proposal, and adopt is a
separate explicit step (unless ``auto_adopt``). Module map: :mod:`.consolidate` (the
learning stages), :mod:`.pipeline` (gather, decide, persist), :mod:`.outcome` (results).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import structlog

from skillopt.errors import ConfigError, RefusedError, SkillOptError
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.consolidate import Night
from skillopt_sleep.observer import NO_OBSERVER, StageObserver
from skillopt_sleep.outcome import Clock, NightFailed, NightOutcome, NightResult
from skillopt_sleep.progress import LogProgress, NightProgress
from skillopt_sleep.rundir import RunDir, RunStatus, utc_now
from skillopt_sleep.spend import ModelPool
from skillopt_sleep.state import project_dir

__all__ = ["NightFailed", "NightOutcome", "NightResult", "run_night"]


def resolve_project(project: Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(project)))


def now_clock() -> datetime:
    return utc_now()


def runs_dir(cfg: SleepConfig, project: Path) -> Path:
    return project_dir(cfg.state_path(), project) / "runs"


# --------------------------------------------------------------------------- entry point


def _find_resumable(
    root: Path, cfg: SleepConfig, *, dry_run: bool, now: datetime
) -> tuple[RunDir | None, list[str]]:
    """The last run if it was killed mid-night and can be resumed; abort it otherwise.

    The caller holds the project lock, so a run still marked ``running`` is dead.
    """
    notes: list[str] = []
    runs = RunDir.list_runs(root)
    if not runs:
        return None, notes
    try:
        last = RunDir.open(runs[-1])
    except SkillOptError as exc:
        notes.append(f"ignored an unreadable earlier run: {exc}")
        return None, notes
    stopped = last.status in (RunStatus.ABORTED, RunStatus.FAILED)
    interrupted = stopped and last.journal.get("resumable")
    if last.status is not RunStatus.RUNNING and not interrupted:
        return None, notes
    reason = ""
    if last.status is RunStatus.FAILED and len(last.journal["resumed"]) >= MAX_FAILED_RESUMES:
        reason = f"failed again after {MAX_FAILED_RESUMES} resumes; a new night starts"
    elif last.journal.get("dry_run") != dry_run:
        reason = "interrupted; the next night was a different kind (dry run vs real)"
    elif last.journal.get("config_hash") != cfg.fingerprint():
        reason = "interrupted; the configuration changed before it could be resumed"
    elif not last.stage_done("harvest"):
        reason = "interrupted before its tasks were saved; a new night starts from scratch"
    if reason:
        last.journal["resumable"] = False
        last.finish(RunStatus.ABORTED, now, outcome="aborted", reason=reason)
        notes.append(f"earlier run {last.run_id} marked aborted: {reason}")
        return None, notes
    if last.status is RunStatus.FAILED:
        asked_again = _forget_failed_reflections(last)
        notes.append(
            f"run {last.run_id} failed ({last.journal.get('reason') or 'an outage'}); "
            "resuming it keeps every call that answered"
            + (f", and asks {asked_again} failed reflection(s) again" if asked_again else "")
        )
    return last, notes


def check_startable(config: SleepConfig, project: Path) -> None:
    """What would make the night useless, refused before any run directory or model call:
    a project that is not a directory, a document the night may change that adoption
    could not write (outside ``skill_roots``)."""
    from skillopt_sleep.adopt import check_adoptable

    if not project.is_dir():
        raise ConfigError(f"{project} is not a directory", key="project")
    roots = config.adopt_roots(project)
    documents = (
        ("skill_path", config.night.evolve_skill, config.live_skill_path()),
        ("memory_path", config.night.evolve_memory, config.live_memory_path(project)),
    )
    for key, evolves, path in documents:
        if not evolves:
            continue
        try:
            check_adoptable(path.name, path, roots)
        except RefusedError as exc:
            raise ConfigError(
                f"{exc}; a night would stage a proposal nobody could adopt, so none starts "
                f"(or set night.evolve_{key.removesuffix('_path')} = false)",
                key=key,
            ) from None


MAX_FAILED_RESUMES = 3


def _forget_failed_reflections(run: RunDir) -> int:
    """Reflections none of whose calls answered are asked again on resume: they were an
    outage, not a reply (checkpoints of answered reflections are kept)."""
    checkpoint = run.journal["checkpoint"]
    failed = [
        key
        for key, saved in checkpoint.items()
        if key.startswith("reflect.")
        and isinstance(saved, dict)
        and saved.get("errors")
        and not saved.get("edits")
        and not saved.get("raw")
    ]
    for key in failed:
        del checkpoint[key]
    return len(failed)


async def run_night(
    config: SleepConfig,
    *,
    project: Path,
    dry_run: bool = False,
    demo: bool = False,
    pool: ModelPool | None = None,
    clock: Clock | None = None,
    progress: NightProgress | None = None,
    tasks_file: Path | None = None,
    observer: StageObserver = NO_OBSERVER,
) -> NightOutcome:
    """Run (or resume) one night for ``project``. The caller holds the project lock.

    ``pool`` defaults to the stack opened from ``config.pool`` (closed afterwards); ``demo`` only
    labels the report. Failures of the night become a ``failed`` outcome (exit 1), never
    an exception; configuration problems raise :class:`ConfigError`. ``observer`` is told
    when each stage starts and ends (a seam for tests and tools).
    """
    from skillopt_sleep.pipeline import drive

    check_startable(config, resolve_project(project))
    if pool is None:
        if config.pool is None:  # checked before any run directory is made
            raise ConfigError(
                "no model endpoints configured: add a [pool] section to the sleep config "
                "(see docs/night.md), or try `skillopt-sleep once --demo`",
                key="pool",
            )
        from skillopt.executor.ray_members import open_night_completer

        async with open_night_completer(config.pool, executor=config.night.executor) as stack:
            return await run_night(
                config,
                project=project,
                dry_run=dry_run,
                demo=demo,
                pool=stack,
                clock=clock,
                progress=progress,
                tasks_file=tasks_file,
                observer=observer,
            )
    clock = clock or now_clock
    progress = progress or LogProgress()
    try:
        project = resolve_project(project)
        root = runs_dir(config, project)
        started = clock()
        run, notes = _find_resumable(root, config, dry_run=dry_run, now=started)
        resumed = run is not None
        if run is None:
            run = RunDir.create(
                root,
                now=started,
                project=str(project),
                project_key=root.parent.name,
                config=config.snapshot(),
                config_hash=config.fingerprint(),
                dry_run=dry_run,
            )
        else:
            run.mark_resumed(started, pid=os.getpid())
            notes.append(f"resumed run {run.run_id} from its last complete stage")
        run.journal["demo"] = demo
        night = Night(
            config=config,
            project=project,
            pool=pool,
            run=run,
            clock=clock,
            progress=progress,
            dry_run=dry_run,
            resumed=resumed,
            observer=observer,
        )
        night.notes.extend(notes)
        with structlog.contextvars.bound_contextvars(run_id=run.run_id, project=project.name):
            return await drive(night, tasks_file=tasks_file, demo=demo)
    finally:
        progress.close()
