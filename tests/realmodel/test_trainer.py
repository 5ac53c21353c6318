"""Two trainer steps against a small real instruct model (SmolLM2-135M-Instruct on 127.0.0.1).

``skillopt train`` on the bundled rubric sample (six train items in batches of three: two
steps, then the final evaluation), its pool the real model's server, run once for the module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.real_model import RealModelServer, ServerStats

pytestmark = [pytest.mark.realmodel, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
RUBRIC_DEMO = REPO / "configs" / "trainer" / "rubric_demo.toml"


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainRun:
    code: int
    stdout: str
    stderr: str
    out: Path
    served: ServerStats
    wall: float
    server_cpu: float

    def read(self, name: str) -> Any:
        return json.loads((self.out / name).read_text())


@pytest.fixture(scope="module")
def trained(real_model: RealModelServer, tmp_path_factory: pytest.TempPathFactory) -> TrainRun:
    root = tmp_path_factory.mktemp("real-train")
    (root / "endpoints.toml").write_text(real_model.pool_toml(table=""))
    out = root / "run"
    before, cpu = real_model.stats(), real_model.cpu_seconds()
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "skillopt.cli", "train", "--config", str(RUBRIC_DEMO),
         "--set", f"out_root={json.dumps(str(out))}",
         "--set", 'backend.kind="pool"',
         "--set", f"backend.pool_config={json.dumps(str(root / 'endpoints.toml'))}",
         "--set", "train.num_epochs=1",
         # a small model on a busy machine: a 256-token answer or verdict can take minutes
         "--set", "env.rollout_timeout_s=600",
         "--log-level", "WARNING"],
        capture_output=True, text=True, timeout=1200, check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    run = TrainRun(
        code=done.returncode,
        stdout=done.stdout,
        stderr=done.stderr,
        out=out,
        served=real_model.stats().since(before),
        wall=time.monotonic() - started,
        server_cpu=real_model.cpu_seconds() - cpu,
    )
    print(
        f"\ntwo trainer steps on the real model: exit {run.code}, {run.wall:.0f} s "
        f"(model CPU {run.server_cpu:.0f} s), server {run.served}"
    )
    return run


@pytest.fixture(scope="module")
def accounting(trained: TrainRun) -> Iterator[dict[str, Any]]:
    yield trained.read("timing.json")["pool_accounting"]["total"]


def test_no_traceback(trained: TrainRun) -> None:
    assert "Traceback" not in trained.stderr + trained.stdout, trained.stderr[-3000:]
    assert trained.code == 0 or trained.stderr.startswith("skillopt: "), trained.stderr[-3000:]
    assert trained.served.answered > 0


def test_two_steps_exit_0(trained: TrainRun) -> None:
    assert trained.code == 0, trained.stderr[-3000:]
    steps = {record["step"] for record in trained.read("history.json")}
    assert len(steps) == 2
    assert (trained.out / "best_skill.md").is_file()


def test_accounting_counts_every_request_and_token_the_server_saw(
    trained: TrainRun, accounting: dict[str, Any]
) -> None:
    assert trained.served.failed == 0
    assert accounting["calls"] == trained.served.requests
    tokens = accounting["prompt_tokens"] + accounting["completion_tokens"]
    assert tokens == trained.served.tokens
