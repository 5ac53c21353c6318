"""A demo project plus a sleep.toml pointing at it, for CLI and subprocess tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup
from support.fake_model_server import FakeModelServer

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


def openai_members(
    server: FakeModelServer, names: tuple[str, ...], *, key_env: str, timeout: float
) -> str:
    """``[[pool.members]]`` tables for members ``names`` of ``server`` (TOML text)."""
    return "".join(
        f"""
[[pool.members]]
kind = "openai"
name = "{name}"
base_url = "{server.url(name)}"
model = "fake"
api_key_env = "{key_env}"
max_concurrency = 8
timeout = {timeout:g}
"""
        for name in names
    )


def http_config(setup: DemoSetup, server: FakeModelServer, **night: Any) -> SleepConfig:
    """The demo config on two HTTP members (m1, m2) of ``server``; key in SKILLOPT_TEST_FAKE_KEY."""
    data = setup.config.model_dump(mode="json")
    data["night"].update(night)
    data["pool"] = {
        "members": [
            {
                "kind": "openai",
                "name": name,
                "base_url": server.url(name),
                "model": "fake",
                "api_key_env": "SKILLOPT_TEST_FAKE_KEY",
                "max_concurrency": 8,
                "timeout": 10,
            }
            for name in ("m1", "m2")
        ],
        "roles": {"target": ["m1", "m2"], "optimizer": ["m1", "m2"]},
        "retry": {"max_attempts": 2, "base_delay": 0.0, "max_delay": 0.0},
        "breaker": {"failure_threshold": 1000, "cooldown": 0.1},
    }
    return SleepConfig.model_validate(data)


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


def run_cli(capsys: Any, *argv: str) -> tuple[int, Any]:
    """``skillopt-sleep <argv>`` in-process: (exit code, parsed JSON with ``--json``, else
    the printed text)."""
    import json

    from skillopt_sleep.cli import main

    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out) if "--json" in argv else out


def one_member_night(
    setup: DemoSetup,
    server: FakeModelServer,
    *,
    max_concurrency: int,
    max_attempts: int,
    failure_threshold: int,
    cooldown: float = 0.1,
) -> dict[str, Any]:
    """The demo's config as JSON data, its pool one member ``m`` of ``server`` serving both
    roles (key from ``SKILLOPT_TEST_FAKE_KEY``, no back-off), the heuristic miner."""
    data = setup.config.model_dump(mode="json")
    data["night"]["llm_mine"] = False
    data["pool"] = {
        "members": [{"kind": "openai", "name": "m", "base_url": server.url("m"),
                     "model": "fake", "api_key_env": "SKILLOPT_TEST_FAKE_KEY",
                     "max_concurrency": max_concurrency, "timeout": 10}],
        "roles": {"target": ["m"], "optimizer": ["m"]},
        "retry": {"max_attempts": max_attempts, "base_delay": 0.0, "max_delay": 0.0},
        "breaker": {"failure_threshold": failure_threshold, "cooldown": cooldown},
    }  # fmt: skip
    return data
