"""A foreground night against a stopped model server fails at once, saying so (issue 24,
item 9); before, it sat out the whole outage patience (600 s) on refused connections."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from skillopt_sleep.config import load_sleep_config
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.serve.actions import start_night
from skillopt_sleep.serve.jobs import Job
from support.sleep_setup import once, write_config


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A port bound but not listening: every connection to it is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DemoSetup:
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "test-key-not-secret")
    return prepare_demo(tmp_path)


def _refusing_config(setup: DemoSetup, refusing_port: int) -> Path:
    members = "".join(
        f"""
[[pool.members]]
kind = "openai"
name = "{name}"
base_url = "http://127.0.0.1:{refusing_port}/{name}/v1"
model = "fake"
api_key_env = "SKILLOPT_TEST_FAKE_KEY"
"""
        for name in ("m1", "m2")
    )
    pool = members + '\n[pool.roles]\ntarget = ["m1", "m2"]\noptimizer = ["m1", "m2"]\n'
    return write_config(setup, pool=pool, extra="[budget]\noutage_patience_seconds = 600\n")


@pytest.mark.slow
def test_once_fails_at_once_when_every_member_refuses(setup: DemoSetup, refusing_port: int) -> None:
    config = _refusing_config(setup, refusing_port)
    started = time.monotonic()
    done = once(config, setup.project)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr[-2000:]
    outcome = json.loads(done.stdout)
    assert "refused the connection" in json.dumps(outcome), outcome
    assert took < 60  # the patience is 600 s


@pytest.mark.slow
async def test_a_night_started_from_the_dashboard_fails_at_once_too(
    setup: DemoSetup, refusing_port: int
) -> None:
    """Someone clicked "Start the night" and watches its page: it waited out the 600 s
    patience where ``once`` failed at once (issue 32, item 16)."""
    cfg = load_sleep_config(_refusing_config(setup, refusing_port))
    job = Job(ident="1", project="p", title="Night")
    with anyio.fail_after(60):  # the patience is 600 s
        result = await start_night(cfg, setup.project)(job)
    assert result["result"] == "failed", result
    assert "refused the connection" in result["message"], result
