"""`once` under SIGTERM (a systemd stop) stops new work and lets the model calls in flight
finish before it aborts the night (resumable, exit 130): no connection is cut mid-call, and
at most one more round of the endpoint's capacity goes out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from skillopt_sleep.demo import prepare_demo
from support.fake_model_server import FakeModelServer
from support.sleep_setup import write_config
from support.world_http import world_reply

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
    pytest.mark.slow,
]


def _logged_at(stderr: str, event: str) -> float:
    """The wall-clock time of the process's first log line for ``event``."""
    for line in stderr.splitlines():
        if f'"{event}"' in line:
            stamp = json.loads(line)["timestamp"].replace("Z", "+00:00")
            return datetime.fromisoformat(stamp).timestamp()
    raise AssertionError(f"no {event} in the log")


def test_sigterm_lets_calls_in_flight_finish_then_aborts(tmp_path: Path) -> None:
    setup = prepare_demo(tmp_path)
    with FakeModelServer(reply_fn=world_reply, latency=0.6) as server:
        pool = f"""
[[pool.members]]
kind = "openai"
name = "m"
base_url = "{server.url("m")}"
api_key_env = "SKILLOPT_TEST_FAKE_KEY"
model = "fake"
max_concurrency = 4
timeout = 10
"""
        pool += '\n[pool.roles]\ntarget = ["m"]\noptimizer = ["m"]\n'
        # a stop that waited out this grace would fail on the 120 s guard below
        config = write_config(setup, pool=pool, extra="[daemon]\nshutdown_grace_seconds = 600\n")
        config.write_text(config.read_text().replace("[night]\n", "[night]\nllm_mine = false\n"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLOPT_SLEEP__")}
        env.update(HOME=str(tmp_path), SKILLOPT_TEST_FAKE_KEY="k")
        proc = subprocess.Popen(
            [sys.executable, "-m", "skillopt_sleep", "once", "--json",
             "--config", str(config), "--project", str(setup.project)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        try:
            busy = server.wait_until(lambda s: sum(s.in_flight.values()) >= 4, timeout=30)
            assert busy, "no calls in flight"
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        # From when the process began draining (its own log), not from when the signal
        # was sent: on a busy machine the two can be far apart.
        drained = _logged_at(err, "night.signal")
        late = [r for r in server.requests if r.received > drained + 0.2]
        cut = server.disconnects
    assert proc.returncode == 130, err[-2000:]
    assert json.loads(out)["error"] == "interrupted"
    assert cut == 0  # the calls in flight were answered, not dropped
    # no new work: what had been handed to the pool (one round of its 4 slots) at most
    assert len(late) <= 4, [r.received - drained for r in late]
    [run_json] = list((setup.state_dir / "projects").glob("*/runs/*/run.json"))
    record = json.loads(run_json.read_text())
    assert record["status"] == "aborted" and record["resumable"] is True
