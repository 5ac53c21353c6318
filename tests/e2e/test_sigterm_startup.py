"""SIGTERM while `skillopt-sleep` starts up (or winds down) is an interruption: exit 130.

Issue 11 item 11: a SIGTERM before the night's own signal handling existed killed the
process with -15 and nothing said. The start-up is held at a known point without sleeping:
the config file is a FIFO, so the process blocks reading it while the test holds the other
end open, and the test signals only once the kernel has told it the process opened it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import anyio

from skillopt_sleep.commands._common import run_async
from skillopt_sleep.interrupts import treat_sigterm_as_interrupt


def _open_writer_once_read(fifo: Path, proc: subprocess.Popen[bytes]) -> int:
    """The FIFO's write end, opened when the process opens the read end.

    A blocking open of a FIFO's write end returns when a reader opens the other end: the
    kernel hands the test the child's event, with no polling and no deadline. Should the
    process exit before it gets there, a watcher opens the read end itself to release the
    open, and the test fails with what the process said.
    """

    def release_if_it_exits() -> None:
        proc.wait()
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))

    watcher = threading.Thread(target=release_if_it_exits, daemon=True)
    watcher.start()
    writer = os.open(fifo, os.O_WRONLY)
    if proc.poll() is not None:
        os.close(writer)
        raise AssertionError(f"the process exited before it read its config: {proc.communicate()}")
    return writer


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
        out, err = proc.communicate()
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
