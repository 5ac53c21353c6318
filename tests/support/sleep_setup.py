"""A demo project plus a sleep.toml pointing at it, for CLI and subprocess tests."""

from __future__ import annotations

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
