"""``once`` and ``dry-run``: take the project lock, run one night, print the outcome."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import anyio

from skillopt.backends.handoff import read_pending
from skillopt.backends.open import CompleterStack, open_completer
from skillopt.errors import AnswerPendingError, LockHeldError, RefusedError
from skillopt.storage_errors import storage_failures
from skillopt_sleep.commands._common import (
    DEFAULT_PATIENCE,
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    again,
    emit_json,
    known_errors,
    load_config,
    refuse,
    run_async,
    say,
    self_command,
)
from skillopt_sleep.commands._runs import pending, recover_adoptions, say_recovered
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.handoff import (
    as_handoff,
    bind_handoff,
    handoff_dir,
    waiting_lines,
)
from skillopt_sleep.lock import project_lock
from skillopt_sleep.night.entry import NightOutcome, run_night
from skillopt_sleep.night_end import RunStatus
from skillopt_sleep.night_progress import default_progress
from skillopt_sleep.observer import NO_OBSERVER, StageObserver
from skillopt_sleep.shutdown import GracefulStop

__all__ = ["run_command"]


def _check_tasks_file(cfg: SleepConfig, path: Path | None, *, demo: bool) -> None:
    """A real backend refuses an unreviewed tasks file before spending anything."""
    if path is None:
        return
    from skillopt_sleep.mining.tasks_file import load_tasks_file

    loaded = load_tasks_file(path)
    real = demo is False and (cfg.pool is None or any(m.kind != "mock" for m in cfg.pool.members))
    if real and not loaded.reviewed:
        raise RefusedError(
            f"{path} has not been reviewed: read it, edit it if needed, set "
            '"reviewed": true, then run again'
        )


def _print(
    outcome: NightOutcome, args: argparse.Namespace, *, demo: bool = False, handoff: bool = False
) -> None:
    kind = "dry run" if outcome.dry_run else "night"
    say(
        f"{kind} {outcome.run_id}: {outcome.result.value}"
        + (" (resumed)" if outcome.resumed else "")
    )
    if outcome.status is RunStatus.WAITING:
        say(f"  waiting for answers after {outcome.failed_stage}")
    elif outcome.failed_stage:
        say(f"  failed during {outcome.failed_stage}: {outcome.reason}")
    elif outcome.reason:
        say(f"  {outcome.reason}")
    if outcome.status is RunStatus.WAITING and outcome.failed_stage == "harvest":
        say("  sessions and tasks: counted once the mining prompts are answered")
    else:
        say(f"  sessions {outcome.n_sessions} -> tasks {outcome.n_tasks}")
    if outcome.baseline is not None:
        say(
            f"  held-out score {outcome.baseline:.3f} -> {outcome.candidate or 0.0:.3f}"
            f" ({outcome.gate_action or ''}, accepted={outcome.accepted})"
        )
    spend = outcome.spend
    if handoff:  # a prompt waiting for its answer is counted as a failed call, not one made
        waiting = int(spend.get("errors_by_class", {}).get(AnswerPendingError.error_class_name, 0))
        answered = int(spend.get("calls", 0)) - waiting
        say(f"  no model called: {answered} answer(s) taken, ~{spend.get('tokens', 0)} tokens")
    else:
        say(f"  model calls {spend.get('calls', 0)}, tokens {spend.get('tokens', 0)}")
    if outcome.proposal_dir and demo:
        say(f"  proposal staged in {outcome.proposal_dir}")
    elif outcome.proposal_dir:
        say(f"  proposal staged in {outcome.proposal_dir} (adopt with `{again(args, 'adopt')}`)")
        skills = [p["name"] for p in pending(outcome.proposal_dir.parent) if p["fanout"]]
        if skills:
            say(f"  your skills improved: {', '.join(skills)} (adopt with "
                f"`{again(args, 'adopt')} --skill NAME` or `--all`)")  # fmt: skip
    if outcome.report_path:
        say(f"  report: {outcome.report_path}")
        html = outcome.report_path.with_name("report.html")
        if html.is_file():
            say(f"  report page: {html} (all nights: {html.parents[2] / 'index.html'})")


def _resume_command(args: argparse.Namespace, *, dry_run: bool) -> str:
    """The command line that resumes this night (handoff mode says it)."""
    flags = ("--demo", "--handoff")
    extra = [flag for flag in flags if getattr(args, flag.removeprefix("--"), False)]
    wait = float(getattr(args, "wait", 0.0) or 0.0)
    if wait:
        extra += ["--wait"] if wait == DEFAULT_PATIENCE else ["--wait", f"{wait:g}"]
    return again(args, "dry-run" if dry_run else "once", *extra)


def run_command(
    args: argparse.Namespace, *, dry_run: bool, observer: StageObserver = NO_OBSERVER
) -> int:
    """Run the night the arguments describe; ``observer`` watches its stages (tests)."""
    demo = bool(getattr(args, "demo", False))
    resume = _resume_command(args, dry_run=dry_run)
    if demo and getattr(args, "handoff", False) and getattr(args, "state_dir", None) is None:
        return refuse(args, "usage", "--demo --handoff needs --state-dir DIR: a demo in a "
                      "temporary folder could never be resumed with the answers")  # fmt: skip
    try:
        cfg, project = load_config(args)
        if getattr(args, "handoff", False):
            cfg = as_handoff(cfg)
        wait = float(getattr(args, "wait", 0.0) or 0.0)
        if wait and (cfg.pool is None or not cfg.pool.handoff):
            return refuse(args, "usage", "--wait is for a handoff night: add --handoff (or "
                          '[pool] kind = "handoff")')  # fmt: skip
        cfg = bind_handoff(cfg, project, resume=resume, wait=wait)
        _check_tasks_file(cfg, args.tasks_file, demo=demo)
        lock = project_lock(cfg.state_path(), project, command="dry-run" if dry_run else "once")
        with lock:
            recovered = recover_adoptions(cfg, project)  # the night reads the live files
            say_recovered([] if args.json else recovered)
            outcome: NightOutcome = run_async(
                _night, cfg, project, dry_run, demo, args.tasks_file, observer
            )
    except KeyboardInterrupt:
        return refuse(args, "interrupted", "interrupted; the next `once` resumes this night",
                      EXIT_INTERRUPTED)  # fmt: skip
    except LockHeldError as exc:
        return refuse(args, "lock_held", f"another night holds the lock: {exc}")
    except known_errors() as exc:
        return refuse(args, type(exc).__name__, str(exc), EXIT_REFUSED)
    except (OSError, BaseExceptionGroup) as exc:  # a full disk, a read-only state dir
        failure = storage_failures(exc)
        if failure is None:
            raise
        return refuse(args, "StorageError", str(failure), EXIT_REFUSED)
    if args.json:
        data = {**outcome.to_dict(), "recovered_adoptions": [r.to_dict() for r in recovered]}
        if outcome.status is RunStatus.WAITING:
            where = handoff_dir(cfg, project)
            data["handoff"] = {"dir": str(where), "pending": len(read_pending(where)),
                               "resume": resume}  # fmt: skip
        emit_json(data)
    else:
        _print(outcome, args, demo=demo, handoff=cfg.pool is not None and cfg.pool.handoff)
        if outcome.status is RunStatus.WAITING:
            for line in waiting_lines(handoff_dir(cfg, project), resume):
                say(line)
        elif demo and outcome.report_path:
            root = project.parent  # the demo's own directory (in --state-dir, if given)
            state = cfg.state_path()
            home = state if root.is_relative_to(state) else root
            say(
                f"\nDemo finished (everything lives under {home}; nothing else was touched)."
                f"\nRead the report: {outcome.report_path}"
            )
            html = outcome.report_path.with_name("report.html")
            if html.is_file():
                say(f"Or open it in a browser: {html}")
            demo_args = shlex.join(
                ["--config", str(root / "sleep.toml"), "--project", str(root / "demo-project")]
            )
            me = self_command()
            say(
                "Then try the rest on the demo:"
                f"\n  {me} status {demo_args}"
                f"\n  {me} adopt {demo_args}"
                f"\n  {me} report --open {demo_args}"
            )
    return outcome.exit_code


async def _night(
    cfg: SleepConfig,
    project: Path,
    dry_run: bool,
    demo: bool,
    tasks_file: Path | None,
    observer: StageObserver,
) -> NightOutcome:
    """Run the night; SIGTERM (a systemd stop, a timer's kill) stops it cleanly.

    The first SIGTERM stops new model calls and lets those in flight finish (at most
    ``daemon.shutdown_grace_seconds``; a second SIGTERM skips the wait), then cancels.
    Cancellation unwinds through the pipeline, which marks the run ``aborted`` and
    resumable; we then report it as an interruption (exit 130). A handoff night waiting for
    answers (``--wait``) is cancelled at once: its calls in flight are prompts nobody may
    answer, and each is written to ``pending.json`` as the pool closes.
    """
    waits = cfg.pool is not None and any(getattr(m, "wait", 0) > 0 for m in cfg.pool.members)
    async with AsyncExitStack() as resources:
        pool: CompleterStack | None = None
        if cfg.pool is not None:  # else run_night explains the missing [pool]
            opened = open_completer(cfg.pool, drainable=True, executor=cfg.night.executor)
            pool = await resources.enter_async_context(opened)
        stop = GracefulStop("night")
        outcome: NightOutcome | None = None
        try:
            async with anyio.create_task_group() as tg:

                async def on_stop() -> None:
                    await stop.requested.wait()
                    grace = 0.0 if waits else cfg.daemon.shutdown_grace_seconds
                    drain = pool.drain if pool is not None else None
                    await stop.cancel_after_drain(tg.cancel_scope, drain=drain, grace=grace)

                await tg.start(stop.watch_signals, signal.SIGTERM)
                tg.start_soon(on_stop)
                outcome = await run_night(
                    cfg,
                    project=project,
                    pool=pool,
                    dry_run=dry_run,
                    demo=demo,
                    progress=default_progress(sys.stderr),
                    tasks_file=tasks_file,
                    observer=observer,
                    foreground=True,
                )
                tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:  # surface the night's own error, not the group
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
    if outcome is None:  # cancelled by SIGTERM
        raise KeyboardInterrupt
    return outcome
