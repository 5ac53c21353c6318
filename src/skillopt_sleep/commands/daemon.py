"""`skillopt-sleep daemon`: run every configured project's night on schedule until stopped.

Stop with SIGTERM or Ctrl-C (a second one cancels at once); reload the config with SIGHUP.
Exit codes: 0 stopped cleanly, 2 bad config or another daemon already running, 130 stopped
after cancelling a night (it is resumed at the next start).

Test hook: ``SKILLOPT_SLEEP_TEST_NIGHT=sleep:<seconds>`` replaces the real night with one
that only sleeps and writes a minimal run record; the subprocess tests use it to exercise
scheduling and signals without models. Never set it in production.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from skillopt.atomicio import atomic_write_json
from skillopt.errors import ConfigError, LockHeldError, SkillOptError
from skillopt.logging import configure_logging, get_logger
from skillopt_sleep.commands._common import run_async
from skillopt_sleep.daemon import (
    ConfigLoader,
    Daemon,
    DaemonConfig,
    NightRequest,
    NightRunner,
    NightStatus,
    NightSummary,
)
from skillopt_sleep.daemon_settings import DaemonSettings
from skillopt_sleep.draining import DrainingPool

NAME = "daemon"
HELP = "Run nights on schedule in one long-lived process (SIGTERM stops, SIGHUP reloads)."
ORDER = 30

TEST_NIGHT_ENV = "SKILLOPT_SLEEP_TEST_NIGHT"
EXIT_REFUSED = 2


def _log() -> Any:
    """Looked up per call: a module-level bound logger would freeze the logging config."""
    return get_logger(__name__)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=Path, default=None, help="sleep.toml (default ~/.config/skillopt/)"
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
        help="schedule the bundled demo project (mock model, temp state dir) every --every s",
    )
    parser.add_argument("--every", type=int, default=30, help="demo: seconds between nights")
    parser.add_argument(
        "--demo-latency", type=float, default=0.0, help="demo: seconds per mock model call"
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")


def run(args: argparse.Namespace) -> int:
    configure_logging(level=args.log_level)
    try:
        if args.demo:
            loader = demo_loader(args.every, args.demo_latency, args.shutdown_grace)
        else:
            projects = [Path(p).expanduser().resolve() for p in args.project]
            loader = make_loader(args.config, projects, args.shutdown_grace)
        return int(run_async(Daemon(loader, handle_signals=True).run))
    except (ConfigError, LockHeldError) as exc:
        sys.stderr.write(f"skillopt-sleep daemon: {exc}\n")
        return EXIT_REFUSED
    except SkillOptError as exc:
        sys.stderr.write(f"skillopt-sleep daemon: {exc}\n")
        return 1


def _settings(settings: DaemonSettings, grace: float | None) -> DaemonSettings:
    if grace is None:
        return settings
    return DaemonSettings.model_validate({**settings.model_dump(), "shutdown_grace_seconds": grace})


def make_loader(
    config_path: Path | None, projects: list[Path], grace: float | None = None
) -> ConfigLoader:
    """A loader the daemon calls at start and on every SIGHUP."""

    def load() -> DaemonConfig:
        from skillopt_sleep.config import load_sleep_config

        cfg = load_sleep_config(config_path)
        return daemon_config(cfg, _settings(cfg.daemon.with_projects(projects), grace))

    return load


def demo_loader(every: int, latency: float, grace: float | None) -> ConfigLoader:
    """The bundled demo project, scheduled every ``every`` seconds in a temp state dir."""
    from skillopt_sleep.demo import demo_pool, prepare_demo

    if not 1 <= every <= 59 or 60 % every:
        raise ConfigError("must divide 60 (1-59)", key="--every")
    setup = prepare_demo(Path(tempfile.mkdtemp(prefix="skillopt-sleep-demo-daemon-")))
    data = setup.config.model_dump(mode="json")
    data["pool"] = demo_pool(latency=latency).model_dump(mode="json")
    data["daemon"] = {
        "cron": f"*/{every} * * * * *",
        "catch_up": False,
        "projects": [{"path": str(setup.project)}],
    }
    if grace is not None:
        data["daemon"]["shutdown_grace_seconds"] = grace
    from skillopt_sleep.config import SleepConfig

    cfg = SleepConfig.model_validate(data)
    _log().info("daemon.demo", root=str(setup.root), project=str(setup.project), every_s=every)

    def load() -> DaemonConfig:
        return daemon_config(cfg, cfg.daemon)

    return load


def daemon_config(cfg: Any, settings: DaemonSettings) -> DaemonConfig:
    """Bind one loaded SleepConfig to a night runner (the test night if requested)."""
    spec = os.environ.get(TEST_NIGHT_ENV, "")
    if spec:
        return DaemonConfig(
            settings=settings, state_dir=cfg.state_path(), runner=_test_night(cfg, spec)
        )
    if cfg.pool is None:
        raise ConfigError(
            "no model endpoints configured: add a [pool] section (or try --demo)", key="pool"
        )
    shared = SharedPool(cfg.pool)
    return DaemonConfig(
        settings=settings,
        state_dir=cfg.state_path(),
        runner=real_night(cfg, shared),
        drain=shared.drain,
        aclose=shared.aclose,
    )


def _test_night(cfg: Any, spec: str) -> NightRunner:
    kind, _, value = spec.partition(":")
    if kind != "sleep":
        raise ConfigError(f"unknown test night {spec!r}; expected sleep:<seconds>")
    try:
        seconds = float(value)
    except ValueError as exc:
        raise ConfigError(f"bad seconds in {spec!r}") from exc
    return sleep_night(cfg.state_path(), seconds)


class SharedPool:
    """One backend pool for every night of one config, built on first use; a stop drains
    it (no new calls, the ones in flight finish)."""

    def __init__(self, pool_config: Any) -> None:
        self._config = pool_config
        self._pool: Any = None
        self._draining: DrainingPool | None = None

    def get(self) -> DrainingPool:
        if self._draining is None:
            from skillopt.backends.pool import BackendPool

            self._pool = BackendPool.from_config(self._config)
            self._draining = DrainingPool(self._pool)
        return self._draining

    async def drain(self) -> None:
        if self._draining is not None:
            await self._draining.drain()

    async def aclose(self) -> None:
        pool, self._pool, self._draining = self._pool, None, None
        if pool is not None:
            await pool.aclose()


def real_night(cfg: Any, shared: SharedPool) -> NightRunner:
    """Adapter from the daemon's request to :func:`skillopt_sleep.night.run_night`."""

    async def run_one(request: NightRequest) -> NightSummary:
        from skillopt_sleep.night import run_night

        outcome = await run_night(cfg, project=request.project.path, pool=shared.get())
        return summary_from_outcome(outcome)

    return run_one


def summary_from_outcome(outcome: Any) -> NightSummary:
    """Map a NightOutcome (status, spend, run_dir, reason) to the daemon's summary."""
    status = {
        "complete": NightStatus.COMPLETE,
        "failed": NightStatus.FAILED,
        "aborted": NightStatus.ABORTED,
    }.get(str(getattr(outcome, "status", "failed")), NightStatus.FAILED)
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


def sleep_night(state_dir: Path, seconds: float) -> NightRunner:
    """TEST ONLY: a night that sleeps, recording running -> complete | aborted (resumable)."""

    async def run_one(request: NightRequest) -> NightSummary:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        run_dir = state_dir / "projects" / request.key / "runs" / f"{stamp}-{os.getpid()}-test"
        record: dict[str, Any] = {
            "status": "running",
            "project": str(request.project.path),
            "reason": str(request.reason),
            "stage": "sleep",
        }
        atomic_write_json(run_dir / "run.json", record)
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            record.update(status="aborted", abort_reason="daemon shutdown", resumable=True)
            atomic_write_json(run_dir / "run.json", record)
            raise
        record.update(status="complete")
        atomic_write_json(run_dir / "run.json", record)
        return NightSummary(status=NightStatus.COMPLETE, run_dir=run_dir, detail="test night")

    return run_one
