"""The trainer's lift benchmark runs end to end through real HTTP and reads its prompts.

The world answers the trainer's analyst, merge and rank prompts by their tags; if a template
changes so that it no longer can, the run learns nothing and this fails before the
benchmark silently measures nonsense.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_one_consistent_run_learns_every_convention_and_no_harmful_rule() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench/train_lift.py"), "--runs", "1", "--noise", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    assert "solved 24/24, harmful no" in done.stdout, done.stdout + done.stderr
    assert "harmful in best 0/1" in done.stdout
