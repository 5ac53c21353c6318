"""`skillopt-sleep daemon`: run every configured project's night on schedule until stopped.

Stop with SIGTERM or Ctrl-C (a second one cancels at once); reload the config with SIGHUP.
Exit codes: 0 stopped cleanly, 2 bad config or another daemon already running, 130 stopped
after cancelling a night (it is resumed at the next start).

:func:`run` takes the night to run as a seam (``night``): the subprocess tests start the
daemon with one that only sleeps (``tests/support/sleeping_daemon.py``) to exercise
scheduling and signals without models.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skillopt.cli_support import log_level
from skillopt.errors import ConfigError, LockHeldError, SkillOptError
from skillopt_sleep.commands._common import run_async, say_demo_ignores
from skillopt_sleep.night_end import RunStatus

# The scheduler, pydantic settings and the model-call stack are imported where they are
# used: `daemon --help` builds this command's parser and must start fast.
if TYPE_CHECKING:
    from skillopt.backends.open import CompleterStack
    from skillopt.executor.settings import ExecutorSettings
    from skillopt_sleep.config import SleepConfig
    from skillopt_sleep.daemon.service import (
        ConfigLoader,
        DaemonConfig,
        NightRequest,
        NightRunner,
        NightSummary,
    )
    from skillopt_sleep.daemon.settings import DaemonSettings
    from skillopt_sleep.demo import DemoSetup

__all__ = [
    "EXIT_REFUSED",
    "HELP",
    "NAME",
    "ORDER",
    "NightFactory",
    "SharedPool",
    "aborted_summary",
    "daemon_config",
    "demo_loader",
    "make_loader",
    "real_night",
    "register",
    "run",
    "summary_from_outcome",
]

NAME = "daemon"
HELP = "Run nights on schedule in one long-lived process (SIGTERM stops, SIGHUP reloads)."
ORDER = 30

EXIT_REFUSED = 2


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=Path, default=None, help="sleep.toml (default ~/.config/skillopt/)"
    )
    parser.add_argument(
        "--state-dir", type=Path, help="where runs and state are kept (overrides the config)"
    )
    parser.add_argument(
        "--project",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="also schedule this project at the default time (repeatable)",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        help="seconds model calls in flight get to finish after SIGTERM",
    )
    parser.add_argument(
        "--demo",
        action="store_true",
        help="schedule the bundled demo project (mock model) every --every s, in a temp dir "
        "removed at exit (with --state-dir: kept in DIR/demo and reused)",
    )
    parser.add_argument("--every", type=int, default=30, help="demo: seconds between nights")
    parser.add_argument(
        "--demo-latency", type=float, default=0.0, help="demo: seconds per mock model call"
    )
    parser.add_argument(
        "--log-level", type=log_level, default="INFO", help="DEBUG, INFO, WARNING, ERROR"
    )


NightFactory = Callable[["SleepConfig"], "NightRunner"]
"""Builds the night runner for one loaded config (default: :func:`real_night`)."""


def run(args: argparse.Namespace, *, night: NightFactory | None = None) -> int:
    from skillopt.logging import configure_logging
    from skillopt_sleep.daemon.service import Daemon

    configure_logging(level=args.log_level)
    try:
        if args.demo:
            say_demo_ignores(args)
            with demo_home(args.state_dir) as setup:
                loader = demo_loader(
                    args.every, args.demo_latency, args.shutdown_grace, night, setup=setup
                )
                return int(run_async(Daemon(loader, handle_signals=True).run))
        projects = [Path(p).expanduser().resolve() for p in args.project]
        for project in projects:
            if not project.is_dir():
                raise ConfigError(f"{project} is not a directory", key="--project")
        loader = make_loader(
            args.config, projects, args.shutdown_grace, night, state_dir=args.state_dir
        )
        return int(run_async(Daemon(loader, handle_signals=True).run))
    except (ConfigError, LockHeldError) as exc:
        sys.stderr.write(f"skillopt-sleep daemon: {exc}\n")
        return EXIT_REFUSED
    except SkillOptError as exc:
        sys.stderr.write(f"skillopt-sleep daemon: {exc}\n")
        return 1


def _settings(settings: DaemonSettings, grace: float | None) -> DaemonSettings:
    from skillopt_sleep.daemon.settings import DaemonSettings

    if grace is None:
        return settings
    return DaemonSettings.model_validate({**settings.model_dump(), "shutdown_grace_seconds": grace})


def make_loader(
    config_path: Path | None,
    projects: list[Path],
    grace: float | None = None,
    night: NightFactory | None = None,
    *,
    state_dir: Path | None = None,
) -> ConfigLoader:
    """A loader the daemon calls at start and on every SIGHUP."""
    overrides = {"state_dir": str(state_dir.expanduser().absolute()) if state_dir else None}

    def load() -> DaemonConfig:
        from skillopt_sleep.config import load_sleep_config

        cfg = load_sleep_config(config_path, overrides=overrides)
        return daemon_config(cfg, _settings(cfg.daemon.with_projects(projects), grace), night)

    return load


@contextmanager
def demo_home(state_dir: Path | None) -> Iterator[DemoSetup]:
    """The demo daemon's project and state: kept in ``<state_dir>/demo`` (as ``once --demo
    --state-dir``), else in a temp directory removed when the daemon exits (SIGTERM too):
    nothing would ever resume from it."""
    from skillopt_sleep.demo import demo_in, prepare_demo

    if state_dir is not None:
        yield demo_in(state_dir)
        return
    with tempfile.TemporaryDirectory(
        prefix="skillopt-sleep-demo-daemon-", ignore_cleanup_errors=True
    ) as scratch:
        yield prepare_demo(Path(scratch))


def demo_loader(
    every: int,
    latency: float,
    grace: float | None,
    night: NightFactory | None = None,
    *,
    setup: DemoSetup,
) -> ConfigLoader:
    """The bundled demo project (``setup``), scheduled every ``every`` seconds."""
    from skillopt_sleep.demo import demo_pool

    if not 1 <= every <= 59 or 60 % every:
        raise ConfigError("must divide 60 (1-59)", key="--every")
    data = setup.config.model_dump(mode="json")
    data["pool"] = demo_pool(latency=latency).model_dump(mode="json")
    data["daemon"] = {
        "cron": f"*/{every} * * * * *",
        "catch_up": False,
        "projects": [{"path": str(setup.project)}],
    }
    if grace is not None:
        data["daemon"]["shutdown_grace_seconds"] = grace
    from skillopt.logging import get_logger
    from skillopt_sleep.config import SleepConfig

    cfg = SleepConfig.model_validate(data)
    get_logger(__name__).info(
        "daemon.demo", root=str(setup.root), project=str(setup.project), every_s=every
    )

    def load() -> DaemonConfig:
        return daemon_config(cfg, cfg.daemon, night)

    return load


def daemon_config(
    cfg: SleepConfig, settings: DaemonSettings, night: NightFactory | None = None
) -> DaemonConfig:
    """Bind one loaded SleepConfig to its night runner: ``night(cfg)`` when given, else
    real nights sharing one model-call stack."""
    from skillopt_sleep.daemon.service import DaemonConfig

    if night is not None:
        return DaemonConfig(settings=settings, state_dir=cfg.state_path(), runner=night(cfg))
    if cfg.pool is None:
        raise ConfigError(
            "no model endpoints configured: add a [pool] section (or try --demo)", key="pool"
        )
    shared = SharedPool(cfg.pool, executor=cfg.night.executor)
    return DaemonConfig(
        settings=settings,
        state_dir=cfg.state_path(),
        runner=real_night(cfg, shared),
        drain=shared.drain,
        aclose=shared.aclose,
        describe_aborted=lambda request: aborted_summary(cfg, request.project.path),
    )


def aborted_summary(cfg: SleepConfig, project: Path) -> NightSummary | None:
    """The night this process just aborted for ``project``, as its run journal recorded it
    (run directory, calls and tokens it paid for); None when the newest run is not it."""
    from skillopt_sleep.commands._runs import project_runs
    from skillopt_sleep.daemon.service import NightSummary
    from skillopt_sleep.rundir import RunDir

    runs = project_runs(cfg, project)
    if not runs:
        return None
    journal = RunDir.open(runs[-1]).journal
    if journal.status != "aborted" or journal.pid != os.getpid():
        return None
    spend = journal.spend or {}
    return NightSummary(
        status=RunStatus.ABORTED,
        calls=int(spend.get("calls", 0) or 0),
        tokens=int(spend.get("tokens", 0) or 0),
        run_dir=runs[-1],
        detail=f"aborted: {journal.reason or 'interrupted'}",
    )


class SharedPool:
    """One model-call stack for every night of one config, opened on first use; a stop
    drains it (no new calls, the ones in flight finish)."""

    def __init__(self, pool_config: Any, *, executor: ExecutorSettings | None = None) -> None:
        self._config = pool_config
        self._executor = executor
        self._resources = AsyncExitStack()
        self._stack: CompleterStack | None = None

    async def get(self) -> CompleterStack:
        from skillopt.backends.open import open_completer

        if self._stack is None:  # no checkpoint before the assignment: nights share one
            opened = open_completer(self._config, drainable=True, executor=self._executor)
            self._stack = await self._resources.enter_async_context(opened)
        return self._stack

    async def drain(self) -> None:
        if self._stack is not None:
            await self._stack.drain()

    def next_night(self) -> None:
        """What one night left behind goes: the pool's call accounting starts over (a
        night's diagnostics are its own calls, as a ``once`` night's) and the text memos
        are emptied. Without it the daemon's memory grew ~0.25 MB a night, up to the
        memos' bounds (tens of MB)."""
        from skillopt_sleep.replay import forget_night_memos

        forget_night_memos()
        if self._stack is not None:
            self._stack.pool.reset_accounting()

    async def aclose(self) -> None:
        self._stack = None
        await self._resources.aclose()


def real_night(cfg: Any, shared: SharedPool) -> NightRunner:
    """Adapter from the daemon's request to :func:`skillopt_sleep.night.entry.run_night`."""

    async def run_one(request: NightRequest) -> NightSummary:
        from skillopt_sleep.commands._runs import recover_adoptions
        from skillopt_sleep.night.entry import run_night

        recover_adoptions(cfg, request.project.path)  # logged; the night reads the live files
        try:
            outcome = await run_night(cfg, project=request.project.path, pool=await shared.get())
        finally:
            shared.next_night()  # nothing of the night stays in memory while the daemon waits
        return summary_from_outcome(outcome)

    return run_one


def summary_from_outcome(outcome: Any) -> NightSummary:
    """Map a NightOutcome (status, spend, run_dir, reason) to the daemon's summary."""
    from skillopt_sleep.daemon.service import NightSummary

    status = {
        "complete": RunStatus.COMPLETE,
        "failed": RunStatus.FAILED,
        "aborted": RunStatus.ABORTED,
    }.get(str(getattr(outcome, "status", "failed")), RunStatus.FAILED)
    spend = getattr(outcome, "spend", {}) or {}
    detail = str(getattr(outcome, "result", ""))
    reason = str(getattr(outcome, "reason", "") or "")
    return NightSummary(
        status=status,
        calls=int(spend.get("calls", 0) or 0),
        tokens=int(spend.get("tokens", 0) or 0),
        run_dir=getattr(outcome, "run_dir", None),
        detail=f"{detail}: {reason}" if reason else detail,
    )
