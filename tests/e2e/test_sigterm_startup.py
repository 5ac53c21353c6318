"""SIGTERM while `skillopt-sleep` starts up (or winds down) is an interruption: exit 130.

Issue 11 item 11: a SIGTERM before the night's own signal handling existed killed the
process with -15 and nothing said. The start-up is held at a known point without sleeping:
the config file is a FIFO, so the process blocks reading it until the test opens the other
end, and the test signals only once it knows the process is there.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio

from skillopt_sleep.commands._common import run_async
from skillopt_sleep.interrupts import treat_sigterm_as_interrupt


def _open_writer_once_read(fifo: Path, proc: subprocess.Popen[bytes]) -> int:
    """The FIFO's write end, opened as soon as the process has opened the read end."""
    deadline = time.monotonic() + 120  # generous: a cold interpreter on a loaded machine
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the process never opened its config"
        time.sleep(0.01)


def test_sigterm_while_reading_the_config_exits_130(tmp_path: Path) -> None:
    fifo = tmp_path / "sleep.toml"
    os.mkfifo(fifo)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-m", "skillopt_sleep", "once", "--config", str(fifo),
            "--project", str(tmp_path), "--json"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    writer = _open_writer_once_read(fifo, proc)
    try:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(writer)
    assert proc.returncode == 130, err.decode(errors="replace")[-2000:]
    assert b'"error": "interrupted"' in out


def test_sigterm_stays_an_interruption_after_an_event_loop_used_it() -> None:
    before = signal.getsignal(signal.SIGTERM)

    async def night_like() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM):
            pass  # closing the receiver puts the default action back

    try:
        treat_sigterm_as_interrupt()
        installed = signal.getsignal(signal.SIGTERM)
        run_async(night_like)
        assert signal.getsignal(signal.SIGTERM) is installed
    finally:
        signal.signal(signal.SIGTERM, before)
