"""`skillopt train` on a terminal shows a live progress line and one line per step."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skillopt.progress import TtyProgress, terminal_progress

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs/trainer/qa_demo.toml"


def _read_all(fd: int, timeout: float = 60.0) -> bytes:
    """Everything written to the pty until the child side closes (or ``timeout``)."""
    chunks = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO once the child side is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.slow
def test_train_on_a_tty_draws_progress_instead_of_log_lines(tmp_path: Path) -> None:
    out = tmp_path / "run"
    master, slave = pty.openpty()
    argv = [sys.executable, "-m", "skillopt.cli", "train", "--config", str(DEMO)]
    argv += ["--set", f"out_root={json.dumps(str(out))}", "--set", "backend.demo_latency_s=0"]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        cwd=REPO,
    )
    os.close(slave)
    try:
        # Drain the terminal while the run writes to it (a full pty buffer would block the
        # child); the read ends when the child exits and the last slave end closes.
        terminal = _read_all(master).decode("utf-8", "replace")
        stdout, _ = proc.communicate(timeout=60)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, terminal[-2000:]
    total = json.loads((out / "summary.json").read_text())["total_steps"]
    assert "[baseline on 30 val items] calls" in terminal
    assert f"[step 1/{total} epoch 1] calls" in terminal
    assert "rollout" in terminal and "analyst" in terminal  # calls counted by stage
    for step in range(1, total + 1):
        assert f"step {step}/{total}: " in terminal
    assert "step_done" not in terminal  # info logs stay quiet under the display
    assert b"accepted" in stdout


def test_progress_line_redraws_and_off_tty_is_none() -> None:
    stream = io.StringIO()
    assert terminal_progress(stream) is None
    progress = TtyProgress(stream, min_interval=0.0)
    progress.stage("step 2/4 epoch 1")
    progress.call_done(stage="rollout")
    progress.call_done(stage="rollout")
    progress.call_done(stage="analyst")
    progress.note("step 2/4: reject")
    progress.close()
    text = stream.getvalue()
    assert "[step 2/4 epoch 1] calls 3 (analyst 1, rollout 2)" in text
    assert "\r\x1b[2Kstep 2/4: reject\n" in text
    assert text.endswith("\r\x1b[2K")
