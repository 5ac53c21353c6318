"""One night, end to end: :func:`run_night`, the entry point the CLI and the daemon call.

A walk through one night:

1. **Refuse early** (:func:`check_startable`): a project that is not a directory, or a
   document the night may change that adoption could not write, stops it before any run
   directory or model call; so does a missing ``[pool]``.
2. **Open the stack** from ``config.pool`` unless the caller hands one in (and close it
   afterwards).
3. **Open the run** (:func:`_open_run`): resume the last run when :mod:`.resume` says it
   can be, else create a new run directory and its journal (``run.json``).
4. **Build the running night** (:class:`.night_state.Night`) and **drive it** through its
   stages (:func:`.stages.drive`): gather -> rollouts -> rounds -> final check -> test
   split -> stage the proposal -> commit -> report. Every way it ends is a
   :class:`.outcome.NightOutcome`; configuration problems raise :class:`ConfigError`.

The live skill and memory files are only read; staging writes a proposal, and adopt is a
separate explicit step (unless ``auto_adopt``).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import anyio
import structlog

from skillopt.backends.base import Pool
from skillopt.errors import ConfigError, RefusedError
from skillopt.progress import Progress, keep_ticking
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.night.night_state import Night
from skillopt_sleep.night.outcome import NightOutcome, NightResult
from skillopt_sleep.night.quiet.probe import draw_rollouts
from skillopt_sleep.night.resume import find_resumable
from skillopt_sleep.night_progress import LogProgress, find_in_flight
from skillopt_sleep.observer import NO_OBSERVER, StageObserver
from skillopt_sleep.rundir import Clock, RunDir, utc_now
from skillopt_sleep.state import runs_dir

__all__ = ["NightOutcome", "NightResult", "run_night"]


def resolve_project(project: Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(project)))


def now_clock() -> datetime:
    return utc_now()


def check_startable(config: SleepConfig, project: Path) -> None:
    """What would make the night useless, refused before any run directory or model call:
    a project that is not a directory, a document the night may change that adoption
    could not write (outside ``skill_roots``)."""
    from skillopt_sleep.adopt import check_adoptable

    if not project.is_dir():
        raise ConfigError(f"{project} is not a directory", key="project")
    roots = config.adopt_roots(project)
    documents = (
        ("skill_path", config.night.evolve_skill, config.live_skill_path(project)),
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


def _open_night(
    config: SleepConfig, project: Path, *, pool: Pool, clock: Clock, progress: Progress,
    dry_run: bool, demo: bool, observer: StageObserver, foreground: bool,
) -> Night:  # fmt: skip
    """The night over its run directory, opened or resumed (:func:`_open_run`)."""
    run, resumed, notes = _open_run(config, project, dry_run=dry_run, now=clock())
    run.update(demo=demo)
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
        foreground=foreground,
        probe=draw_rollouts,
    )
    night.notes.extend(notes)
    return night


async def run_night(
    config: SleepConfig,
    *,
    project: Path,
    dry_run: bool = False,
    demo: bool = False,
    pool: Pool | None = None,
    clock: Clock | None = None,
    progress: Progress | None = None,
    tasks_file: Path | None = None,
    observer: StageObserver = NO_OBSERVER,
    foreground: bool = False,
) -> NightOutcome:
    """Run (or resume) one night for ``project``. The caller holds the project lock.

    ``pool`` defaults to the stack opened from ``config.pool`` (closed afterwards); ``demo`` only
    labels the report. Failures of the night become a ``failed`` outcome (exit 1), never
    an exception; configuration problems raise :class:`ConfigError`. ``observer`` is told
    when each stage starts and ends (a seam for tests and tools). ``foreground``: someone
    watches (``once``, the dashboard): fail at once, saying why, when every endpoint
    refuses the connection, instead of waiting out the outage patience.
    """
    check_startable(config, resolve_project(project))
    if pool is None:
        if config.pool is None:  # checked before any run directory is made
            raise ConfigError(
                "no model endpoints configured: add a [pool] section to the sleep config "
                "(see docs/night.md), or try `skillopt-sleep once --demo`",
                key="pool",
            )
        from skillopt.backends.open import open_completer
        from skillopt_sleep.handoff import bind_handoff

        bound = bind_handoff(config, resolve_project(project)).pool or config.pool
        async with open_completer(bound, executor=config.night.executor) as stack:
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
                foreground=foreground,
            )
    progress = progress or LogProgress()
    try:
        night = _open_night(
            config, resolve_project(project), pool=pool, clock=clock or now_clock,
            progress=progress, dry_run=dry_run, demo=demo, observer=observer, foreground=foreground,
        )  # fmt: skip
        bound = {"run_id": night.run.run_id, "project": night.project.name}
        with structlog.contextvars.bound_contextvars(**bound):
            return await _drive_ticking(night, pool, progress, tasks_file=tasks_file, demo=demo)
    finally:
        progress.close()


async def _drive_ticking(
    night: Night, pool: Pool, progress: Progress, *, tasks_file: Path | None, demo: bool
) -> NightOutcome:
    """Drive the night while a live display ticks (a slow call shows as slow, not hung)."""
    from skillopt_sleep.night.stages import drive

    watch = getattr(progress, "watch", None)
    in_flight = find_in_flight(pool)
    if callable(watch) and in_flight is not None:
        watch(in_flight)
    result: list[NightOutcome] = []
    async with anyio.create_task_group() as group:
        group.start_soon(keep_ticking, progress)
        result.append(await drive(night, tasks_file=tasks_file, demo=demo))
        group.cancel_scope.cancel()
    return result[0]


def _open_run(
    config: SleepConfig, project: Path, *, dry_run: bool, now: datetime
) -> tuple[RunDir, bool, list[str]]:
    """The run directory tonight works in: the last one resumed, or a new one; whether it
    was resumed; and what to note about earlier runs."""
    root = runs_dir(config.state_path(), project)
    run, notes = find_resumable(root, config, dry_run=dry_run, now=now)
    if run is not None:
        run.mark_resumed(now, pid=os.getpid())
        notes.append(f"resumed run {run.run_id} from its last complete stage")
        return run, True, notes
    run = RunDir.create(
        root,
        now=now,
        project=str(project),
        project_key=root.parent.name,
        config=config.snapshot(),
        config_hash=config.fingerprint(),
        dry_run=dry_run,
    )
    return run, False, notes
