"""SIGTERM stops new work: a daemon night starts no new model call after the signal, the calls
in flight finish, then the night is cancelled (aborted, resumable) without waiting out the
whole grace period."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import anyio
import pytest
from anyio.streams.text import TextReceiveStream

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
    pytest.mark.slow,
]

GRACE = 600.0


def _only_run_json(state: Path) -> Path:
    [run_json] = list(state.glob("projects/*/runs/*/run.json"))
    return run_json


def _only_run(state: Path) -> dict[str, object]:
    record: dict[str, object] = json.loads(_only_run_json(state).read_text())
    return record


async def test_sigterm_drains_in_flight_calls_then_aborts_without_new_work(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    state = tmp_path / "demo-state"  # kept after the daemon exits, to read the aborted run
    argv = [sys.executable, "-m", "skillopt_sleep", "daemon", "--demo", "--every", "2",
            "--demo-latency", "0.3", "--shutdown-grace", str(GRACE),
            "--state-dir", str(state)]  # fmt: skip
    process = await anyio.open_process(argv, env=env, stdin=None)
    events: list[dict[str, object]] = []
    try:
        assert process.stderr is not None
        buffer = ""
        signalled = False
        with anyio.fail_after(60):  # did not wait out the 600 s grace
            async for chunk in TextReceiveStream(process.stderr):
                buffer += chunk
                *lines, buffer = buffer.split("\n")
                for line in lines:
                    try:
                        events.append(json.loads(line))
                    except ValueError:
                        continue
                    event = events[-1]
                    if (
                        not signalled
                        and event.get("event") == "night.stage"
                        and (event.get("stage") == "rollouts")
                    ):
                        await anyio.sleep(0.5)  # calls are in flight now
                        process.send_signal(signal.SIGTERM)
                        signalled = True
            await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 130
    nights = [e for e in events if e.get("event") == "daemon.night"]
    assert [n["outcome"] for n in nights] == ["aborted"]
    record = _only_run(state)
    assert record["status"] == "aborted" and record["resumable"] is True
    # the night's log line tells what the aborted night left and paid for
    assert nights[0]["run_dir"] == str(_only_run_json(state).parent)
    spend = record["spend"]
    assert isinstance(spend, dict) and spend["calls"] > 0
    assert (nights[0]["calls"], nights[0]["tokens"]) == (spend["calls"], spend["tokens"])
