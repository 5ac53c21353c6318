"""Training-loop wall time against its critical-path bound (``make bench``; not a timed test).

A 2-epoch run over 200 train / 100 val / 100 test synthetic QA items, batch 20, with every
model call going over HTTP (loopback) to the fake model server, in a process of its own so
that its CPU is not the trainer's (``--latency`` seconds per reply), through a pool of
``--members`` OpenAI-compatible members of concurrency ``--concurrency`` serving both roles.
The server answers with the demo world model.

The bound is the run's dependency chain with every call taking exactly ``latency`` and
each fan-out limited only by the pool's total concurrency ``C``: for every stage that must
finish before the next starts, ``ceil(calls / C)`` waves. It is computed from the run's own
records (calls per stage and step, merge depth, cache hits), so it tracks what the run did.
Prints the shared figures (:mod:`figures`: wall, bound, ratio, target <= 1.15, CPU per
call of this process only, load average, the load-adjusted ratio), the server process's
own CPU (not counted), the bound at the measured median call latency (on a loaded machine
every call takes longer than the server's latency, mostly client CPU in the SDK), wall
against bound per step stage and outside the steps, and calls per stage.

    .venv/bin/python bench/train.py [--latency 0.2 --members 4 --concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from skillopt.backends.open import open_completer
from skillopt.config import PoolConfig
from skillopt.logging import configure_logging
from skillopt.trainer.config import load_trainer_config
from skillopt.trainer.demo import DemoWorld
from skillopt.trainer.envs.qa import QAEnvironment
from skillopt.trainer.envs.qa_synth import write_synthetic_qa
from skillopt.trainer.loop import Trainer
from skillopt.types import Split

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from figures import Load, cpu_seconds, print_figures  # noqa: E402
from support.bench_pools import openai_pool  # noqa: E402
from support.fake_model_server import FakeModelServer, Request  # noqa: E402


def pool_config(urls: list[str], concurrency: int) -> PoolConfig:
    return PoolConfig.model_validate(openai_pool(urls, concurrency, cache={"enabled": False}))


def make_reply_fn(data_dir: Path) -> Any:
    world = DemoWorld()
    env = QAEnvironment(data_dir)
    items = {
        QAEnvironment.user_prompt(item): dict(item.data)
        for split in Split
        for item in env.items(split)
    }

    def reply(request: Request) -> str:
        messages = request.body.get("messages", []) if isinstance(request.body, dict) else []
        system = "".join(
            str(m.get("content", "")) for m in messages if m.get("role") in ("system", "developer")
        )
        return world.chat_reply(system=system, user=request.user_text, items=items)

    return reply


def serve(data_dir: Path, latency: float) -> None:
    """Child-process mode: the fake server answering with the demo world; prints PORT n."""
    server = FakeModelServer(latency=latency, reply_fn=make_reply_fn(data_dir))

    async def run() -> None:
        await server.serve()
        sys.stdout.write(f"PORT {server.port}\n")
        sys.stdout.flush()
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


class ServerProcess:
    """The fake server in a child process, so its CPU is not the trainer's."""

    def __init__(self, data_dir: Path, latency: float) -> None:
        argv = [sys.executable, __file__, "--serve", str(data_dir), "--latency", str(latency)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("PORT "):
            self.proc.kill()
            raise RuntimeError(f"fake server did not start: {line!r}")
        self.port = int(line.split()[1])

    def url(self, member: str) -> str:
        return f"http://127.0.0.1:{self.port}/{member}/v1"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def waves(n: int, c: int) -> int:
    return math.ceil(n / c) if n > 0 else 0


def gate_units(rec: dict[str, Any], gate_rollouts: int, n_val: int, c: int) -> int:
    """The step's gate on the chain: the paired comparison (both skills at once), then with
    attribution the leave-one-out comparisons (all at once) and the re-measurement, and
    when those found nothing the singles (all at once), the passed ones together and the
    strongest single."""
    if rec.get("selection_cached") is not False:
        return 0
    if "gate" not in rec or rec["gate"].get("mode") != "paired":
        return waves(n_val, c)  # gate off: one val rollout
    looks = rec.get("looks", [])
    stages = 1 + (2 if "spoilers" in looks else 0) + (3 if "singles" in looks else 0)
    return stages * waves(math.ceil(max(gate_rollouts, 2 * n_val) / stages), c)


def step_units(out: Path, rec: dict[str, Any], c: int, n_val: int) -> dict[str, int]:
    """One step's latency units on the chain, under the name of the stage timer that
    times them (the step's ``timing.json``)."""
    calls = {k: v["calls"] for k, v in rec["tokens"].items()}
    merged = out / "steps" / f"step_{rec['step']:04d}" / "merged_patch.json"
    return {
        "rollout_s": waves(rec["rollout_n"], c),
        "reflect_s": waves(calls.get("analyst", 0), c),
        "aggregate_s": json.loads(merged.read_text())["merge_depth"] if merged.exists() else 0,
        "select_s": 1 if calls.get("rank") else 0,
        "update_s": 1 if calls.get("rewrite") else 0,
        "evaluate_s": gate_units(rec, calls.get("rollout", 0) - rec["rollout_n"], n_val, c),
    }


def stage_lines(out: Path, c: int, n_val: int, latency: float, wall: float, units: int) -> str:
    """Wall against bound per step stage (summed over the steps) and outside the steps
    (baseline, epoch ends, final phase): where the run loses time to its bound."""
    history = json.loads((out / "history.json").read_text())
    timing = json.loads((out / "timing.json").read_text())["steps"]
    walls: dict[str, float] = {}
    bounds: dict[str, float] = {}
    for rec in history:
        for stage, n in step_units(out, rec, c, n_val).items():
            walls[stage] = walls.get(stage, 0.0) + timing[str(rec["step"])].get(stage, 0.0)
            bounds[stage] = bounds.get(stage, 0.0) + n * latency
    parts = [f"{k.removesuffix('_s')} {walls[k]:.2f}/{bounds[k]:.2f}" for k in walls]
    rest_wall, rest_bound = wall - sum(walls.values()), units * latency - sum(bounds.values())
    parts.append(f"outside the steps {rest_wall:.2f}/{rest_bound:.2f}")
    return "wall/bound s by stage: " + ", ".join(parts)


def critical_path(out: Path, c: int, n_val: int, n_test: int) -> int:
    """Latency units on the run's dependency chain (see the module docstring)."""
    history = json.loads((out / "history.json").read_text())
    units = waves(n_val, c)  # baseline
    for rec in history:
        units += sum(step_units(out, rec, c, n_val).values())
    for epoch_dir in sorted((out / "slow_update").glob("epoch_*")):
        result = json.loads((epoch_dir / "slow_result.json").read_text())
        if result["action"] == "inject_placeholder":
            continue
        pairs = json.loads((epoch_dir / "comparison_pairs.json").read_text())
        units += waves(2 * len(pairs), c)  # previous and current skill, side by side
        slow_chain = 1 + (waves(n_val, c) if (epoch_dir / "selection_eval").exists() else 0)
        units += max(slow_chain, 1)  # the meta-skill call is independent of the slow update
    if (out / "final_selection_eval").exists():
        units += waves(n_val, c)
    if (out / "final_gate").exists():  # the paired promotion: both skills at once
        units += waves(2 * n_val, c)
    n_test_sets = sum(
        1
        for d in ("test_eval_baseline", "test_eval", "test_eval_final")
        if (out / d / "results.json").exists()
    )
    units += waves(n_test * n_test_sets, c)
    return units


async def run(args: argparse.Namespace) -> int:
    configure_logging(level="WARNING")
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        data = write_synthetic_qa(Path(tmp) / "data", 200, 100, 100, seed=11)
        out = Path(tmp) / "run"
        cfg = load_trainer_config(
            ROOT / "configs/trainer/base.toml",
            overrides=[
                f"out_root={json.dumps(str(out))}",
                f"env.data_dir={json.dumps(str(data))}",
                "train.num_epochs=2",
                "train.batch_size=20",
            ],
        )
        env = QAEnvironment(cfg.env.data_dir)
        server = ServerProcess(data, args.latency)
        try:
            urls = [server.url(f"m{i}") for i in range(args.members)]
            async with open_completer(pool_config(urls, args.concurrency)) as pool:
                load = Load()
                t0, cpu0 = time.perf_counter(), time.process_time()
                summary = await Trainer(cfg, env, pool, pool_accounting=pool.accounting).run()
                wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        finally:
            server.close()
        if args.keep:
            import shutil

            shutil.copytree(out, args.keep, dirs_exist_ok=True)
        c = args.members * args.concurrency
        units = critical_path(out, c, n_val=100, n_test=100)
        bound = units * args.latency
        print(
            f"steps {summary['total_steps']}: accepts {summary['total_accepts']}, "
            f"rejects {summary['total_rejects']}, skips {summary['total_skips']}"
        )
        calls = {k: v["calls"] for k, v in summary["token_summary"].items()}
        n_calls = sum(calls.values())
        print(f"critical path: {units} dependent waves x {args.latency} s")
        print_figures(wall=wall, bound=bound, cpu=cpu, calls=n_calls, load=load, target=1.15)
        print(f"server process CPU  {cpu_seconds(children=True):8.2f} s   (its own; not counted)")
        timing = (
            json.loads((out / "timing.json").read_text())
            if not args.keep
            else json.loads((Path(args.keep) / "timing.json").read_text())
        )
        roles = timing.get("pool_accounting", {}).get("by_role", {})
        for role, row in sorted(roles.items()):
            print(
                f"{role}: calls {row['calls']}, latency p50 {row['latency_p50']:.3f} s, "
                f"p95 {row['latency_p95']:.3f} s"
            )
        if "target" in roles:
            # The same chain at the latency calls actually had on this machine (loaded CPUs
            # stretch every call): separates trainer overhead from call inflation.
            p50 = roles["target"]["latency_p50"]
            print(
                f"bound at the measured median call latency {units * p50:.2f} s, "
                f"ratio {wall / (units * p50):.2f}"
            )
        print(stage_lines(out, c, 100, args.latency, wall, units))
        print("calls per stage: " + ", ".join(f"{k}={v}" for k, v in sorted(calls.items())))
        return 0  # a missed target is reported above; the exit code is for a failed run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--keep", default="", help="copy the run directory here afterwards")
    parser.add_argument("--serve", default="", help=argparse.SUPPRESS)  # child-process mode
    args = parser.parse_args()
    if args.serve:
        serve(Path(args.serve), args.latency)
        return 0
    return anyio.run(run, args)


if __name__ == "__main__":
    sys.exit(main())
