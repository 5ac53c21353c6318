"""A demo project plus a sleep.toml pointing at it, for CLI and subprocess tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from skillopt_sleep.demo import DemoSetup

MOCK_POOL = """
[[pool.members]]
kind = "mock"
name = "mock"
max_concurrency = 16

[pool.roles]
target = ["mock"]
optimizer = ["mock"]
"""


def write_config(setup: DemoSetup, *, pool: str = MOCK_POOL, extra: str = "") -> Path:
    """``<root>/sleep.toml`` for the demo layout; ``pool`` replaces the mock pool tables."""
    path = setup.root / "sleep.toml"
    path.write_text(
        f"""state_dir = "{setup.state_dir}"
{extra}
[sources]
kinds = ["claude_code"]
claude_home = "{setup.claude_home}"
lookback_hours = 0

[night]
dream_rollouts = 3
rounds = 2
edit_budget = 4
{pool}""",
        encoding="utf-8",
    )
    return path


KILLING_NIGHT = Path(__file__).parent / "killing_night.py"


def once(config: Path, project: Path, kill_after: str = "") -> subprocess.CompletedProcess[str]:
    """``once --json`` as a real process; ``kill_after`` runs it through the support script
    that kills it at that point (see tests/support/killing_night.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLOPT_SLEEP__")}
    env["HOME"] = str(config.parent)
    command = [sys.executable, "-m", "skillopt_sleep"]
    if kill_after:
        command = [sys.executable, str(KILLING_NIGHT), kill_after]
    return subprocess.run(
        [*command, "once", "--json", "--config", str(config), "--project", str(project)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
