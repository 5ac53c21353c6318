"""Both command lines stop quietly when the reader of their output goes away (`| head`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from skillopt.cli_support import EXIT_BROKEN_PIPE

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "skillopt_sleep", "status", "--project", "."],
        [
            "-m",
            "skillopt.cli",
            "eval",
            "--config",
            str(REPO / "configs/trainer/qa_demo.toml"),
            "--skill",
            str(REPO / "src/skillopt_sleep/demo/SKILL.md"),
            "--out",
            "eval",
        ],
    ],
)
def test_a_closed_stdout_is_not_a_traceback(tmp_path: Path, argv: list[str]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before we write a byte
    try:
        done = subprocess.run(
            [sys.executable, *argv],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60,
            cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path)}, check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (EXIT_BROKEN_PIPE, 0), done.stderr
