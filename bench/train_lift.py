"""The trainer on the lift world through real HTTP, patch mode: tasks solved per run under noise.

The lift world (``bench/lift_world``: 24 recurring tasks, six house conventions, one harmful
rule its bait tasks tempt an optimizer into) as a trainer environment
(:mod:`lift_world.trainer`): train, val and test are each task's first, second and third
wording. Every model call goes over loopback HTTP to the world model in a server process of
its own (its CPU is not the trainer's), which flips ``--noise`` of the attempts (right ->
one convention dropped, wrong -> right), seeded per run. A held-out world: world seeds 101..
(the night's lift bench tunes on 0..).

Per run it prints the tasks the run's best skill truly solves (of 24, :meth:`World.
true_score`, not the trainer's own estimate), whether the harmful rule is in it, the
steps accepted / rejected, and calls; then the mean over runs, harmful-in-best count,
and wall / load / CPU (:mod:`figures`).

The run: ``configs/trainer/base.toml`` in patch mode, 3 epochs of 3 steps (batch 8 of the
24 train items), learning rate 4, no slow update or meta skill (the world model does not
answer those prompts), no test evaluation (the true score is computed from the best skill).

    .venv/bin/python bench/train_lift.py [--runs 6 --noise 0.2 --world-seed 101]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
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
from skillopt.trainer.loop import Trainer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from figures import Load, cpu_seconds  # noqa: E402
from lift_world.model import WorldModel  # noqa: E402
from lift_world.trainer import LiftTrainerEnv, TrainerModel  # noqa: E402
from lift_world.world import LIFT  # noqa: E402
from support.bench_pools import openai_pool  # noqa: E402
from support.fake_model_server import FakeModelServer  # noqa: E402

OVERRIDES = [
    "train.num_epochs=3",
    "train.batch_size=8",
    "optimizer.learning_rate=4",
    "optimizer.use_slow_update=false",
    "optimizer.use_meta_skill=false",
    "evaluation.eval_test=false",
    "env.max_output_tokens=256",
]


def serve(world_seed: int, noise: float, seed: int) -> None:
    """Child-process mode: the world model behind HTTP; prints PORT n."""
    model = WorldModel(world_seed=world_seed)
    model.configure(world_seed=world_seed, noise=noise, seed=seed)
    server = FakeModelServer(latency=0.0, reply_fn=TrainerModel(model).reply)

    async def run() -> None:
        await server.serve()
        sys.stdout.write(f"PORT {server.port}\n")
        sys.stdout.flush()
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


class ServerProcess:
    def __init__(self, world_seed: int, noise: float, seed: int) -> None:
        argv = [sys.executable, __file__, "--serve", f"{world_seed},{noise},{seed}"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("PORT "):
            self.proc.kill()
            raise RuntimeError(f"world server did not start: {line!r}")
        self.port = int(line.split()[1])

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


async def one_run(out: Path, *, world_seed: int, noise: float, seed: int) -> dict[str, Any]:
    """One training run; what its best skill truly solves."""
    cfg = load_trainer_config(
        ROOT / "configs/trainer/base.toml",
        overrides=[
            *OVERRIDES,
            f"out_root={json.dumps(str(out))}",
            f"train.seed={seed}",
        ],
    )
    server = ServerProcess(world_seed, noise, seed)
    try:
        urls = [f"http://127.0.0.1:{server.port}/m{i}/v1" for i in range(2)]
        pool_cfg = PoolConfig.model_validate(openai_pool(urls, 16, cache={"enabled": False}))
        async with open_completer(pool_cfg) as pool:
            summary = await Trainer(cfg, LiftTrainerEnv(), pool).run()
    finally:
        server.close()
    best = (out / "best_skill.md").read_text()
    score = LIFT.true_score(best)
    calls = sum(v["calls"] for v in summary["token_summary"].values())
    return {
        "solved": score.solved,
        "harmful": score.harmful,
        "accepts": summary["total_accepts"],
        "rejects": summary["total_rejects"],
        "steps": summary["total_steps"],
        "calls": calls,
        "best": best,
    }


async def run(args: argparse.Namespace) -> int:
    configure_logging(level="WARNING")
    load = Load()
    t0, cpu0 = time.perf_counter(), time.process_time()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-train-lift-") as tmp:
        for i in range(args.runs):
            ws, seed = args.world_seed + i, 1000 + i
            row = await one_run(Path(tmp) / f"run{i}", world_seed=ws, noise=args.noise, seed=seed)
            rows.append(row)
            print(
                f"run {i} (world {ws}, seed {seed}): solved {row['solved']}/24, "
                f"harmful {'YES' if row['harmful'] else 'no'}, steps {row['steps']} "
                f"(accept {row['accepts']}, reject {row['rejects']}), calls {row['calls']}",
                flush=True,
            )
            if args.show:
                print(row["best"])
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    solved = [r["solved"] for r in rows]
    print(
        f"noise {args.noise}: mean solved {statistics.mean(solved):.2f}/24 over {len(rows)} runs "
        f"(min {min(solved)}, max {max(solved)}); harmful in best "
        f"{sum(r['harmful'] for r in rows)}/{len(rows)}; calls {sum(r['calls'] for r in rows)} "
        f"({statistics.mean(r['calls'] for r in rows):.0f} per run)"
    )
    print(
        f"wall {wall:.1f} s, load {load.line()}, CPU {cpu:.1f} s (this process), "
        f"servers {cpu_seconds(children=True):.1f} s"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--noise", type=float, default=0.2)
    parser.add_argument("--world-seed", type=int, default=101)
    parser.add_argument("--show", action="store_true", help="print each run's best skill")
    parser.add_argument("--serve", default="", help=argparse.SUPPRESS)  # child-process mode
    args = parser.parse_args()
    if args.serve:
        ws, noise, seed = args.serve.split(",")
        serve(int(ws), float(noise), int(seed))
        return 0
    return anyio.run(run, args)


if __name__ == "__main__":
    sys.exit(main())
