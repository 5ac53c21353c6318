"""``skillopt-sleep serve`` as a real subprocess over a state directory holding two demo
projects, and what tests need around it (the start URL, a snapshot of the state files)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Served", "serve", "snapshot", "two_projects"]

_URL = re.compile(r"(http://127\.0\.0\.1:(\d+))/\?token=([A-Za-z0-9_-]+)")


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLOPT_SLEEP__")}
    return subprocess.run(
        [sys.executable, "-m", "skillopt_sleep", *argv],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


def two_projects(root: Path) -> tuple[Path, Path]:
    """A state directory with two demo projects, one night each (a proposal waiting in
    both); returns it and the config that reaches them (the first demo's)."""
    state, other = root / "state", root / "other"
    for where in (state, other):
        done = _cli("once", "--demo", "--state-dir", str(where), "--json")
        assert done.returncode == 0, done.stderr
    for project in (other / "projects").iterdir():  # the second demo's project joins the first
        shutil.move(str(project), state / "projects" / project.name)
    return state, state / "demo" / "sleep.toml"


@dataclass(frozen=True, slots=True)
class Served:
    base: str  # http://127.0.0.1:PORT
    token: str
    url: str  # what the server printed: base + /?token=...

    @property
    def origin(self) -> dict[str, str]:
        return {"Origin": self.base}


@contextmanager
def serve(state: Path, config: Path) -> Iterator[Served]:
    """Start ``serve --port 0``, read the URL it prints, stop it with Ctrl-C at the end
    (and check it exits 0). Its log goes to ``serve.log`` beside the state directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLOPT_SLEEP__")}
    log = state.parent / "serve.log"
    with log.open("a") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "skillopt_sleep", "serve", "--config", str(config),
             "--state-dir", str(state), "--port", "0"],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once the socket is bound
        found = _URL.search(line)
        assert found, (line, log.read_text())
        yield Served(base=found.group(1), token=found.group(3), url=found.group(0))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    assert code == 0, log.read_text()


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes (a GET must leave them all as they were)."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }
