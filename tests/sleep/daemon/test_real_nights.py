"""The daemon's real nights share one model-call stack; what one night counted stays its own."""

from __future__ import annotations

import json
from pathlib import Path

from skillopt_sleep.commands.daemon import SharedPool, real_night
from skillopt_sleep.daemon.service import NightRequest, WakeReason
from skillopt_sleep.daemon.settings import ProjectSchedule
from skillopt_sleep.demo import prepare_demo


async def test_each_daemon_night_reports_its_own_pool_calls(tmp_path: Path) -> None:
    """diagnostics.json's pool accounting is the night's, as for a `once` night: it summed
    every night since the daemon started (and its latency reservoirs grew with them)."""
    setup = prepare_demo(tmp_path / "demo")
    shared = SharedPool(setup.config.pool)
    runner = real_night(setup.config, shared)
    request = NightRequest(
        project=ProjectSchedule(path=setup.project),
        key="demo",
        reason=WakeReason.SCHEDULED,
        scheduled_for=None,
    )
    try:
        nights = [await runner(request), await runner(request)]
    finally:
        await shared.aclose()
    for night in nights:
        assert night.run_dir is not None and night.calls > 0
        pool = json.loads((night.run_dir / "diagnostics.json").read_text())["pool"]
        assert pool["total"]["calls"] == night.calls, pool["total"]
