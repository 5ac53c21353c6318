"""``bench/lift.py --quick`` runs two chained nights end to end and prints the per-night table.

Only that it runs: the targets are the benchmark's business, not this test's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_lift_quick_runs_two_chained_nights_and_prints_the_table() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    argv = [sys.executable, str(ROOT / "bench" / "lift.py"), "--quick"]
    done = subprocess.run(
        [*argv, "--nights", "2", "--noisy-nights", "0", "--latency", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("phase") and "true" in line and "calls" in line for line in lines)
    rows = [line for line in lines if re.match(r"^clean1\s+\d+\s", line)]
    assert [int(r.split()[1]) for r in rows] == [1, 2], done.stdout
    # each row: a night result and a true score read from the adopted files (n/24 and %)
    assert all(re.search(r"\s\d+/24\s+\d+%", r) for r in rows), done.stdout
    assert not any(line.startswith("noisy") for line in lines)
