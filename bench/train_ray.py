"""Exec rollouts as Ray tasks against the same rollouts in this process (``make bench``).

200 ``qa_exec`` rollouts through the trainer's rollout stage (journal, results by index),
each run by a fake codex CLI (a real executable: Python start-up plus ``--agent-s`` seconds
of waiting, like an agent waiting on its model). Once locally with the exec member at
concurrency ``C``, once with ``[executor] kind = "ray"`` on a private local Ray instance of
``C`` CPUs (one rollout per CPU, so ``C`` in flight too). Both must give the same results.

Bound = ceil(N / C) x (one agent run measured alone). Prints each run's wall, bound and
ratio, the Ray run's wall over the local one (target <= 1.3: on 2 cores Ray cannot be faster,
the point is that its overhead is small), the executor's overhead per rollout
((wall_ray - wall_local) x C / N), CPU per rollout and the load average. Ray's servers
listen on every interface, so the Ray run happens in a private network namespace (only
``lo``); where that is not permitted the benchmark says so and exits 0.

    .venv/bin/python bench/train_ray.py [--rollouts 200] [--concurrency 2] [--agent-s 0.3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from figures import Load, print_figures  # noqa: E402
from skillopt.backends.wrappers import StageCounter  # noqa: E402
from skillopt.logging import configure_logging  # noqa: E402
from skillopt.trainer.build import open_environment  # noqa: E402
from skillopt.trainer.config import TrainerConfig, load_trainer_config  # noqa: E402
from skillopt.trainer.demo import DemoWorld  # noqa: E402
from skillopt.trainer.envs.base import rollout_to_json  # noqa: E402
from skillopt.trainer.envs.qa_synth import write_synthetic_qa  # noqa: E402
from skillopt.trainer.persistence import RunDir  # noqa: E402
from skillopt.trainer.rollouts import rollout  # noqa: E402
from skillopt.trainer.run_context import RunContext  # noqa: E402
from skillopt.types import Split  # noqa: E402
from support.fake_cli import FakeCli, codex_events, write_fake_cli  # noqa: E402
from support.netns import private_network  # noqa: E402

TARGET = 1.3
SKILL = "Read task.md, answer in <answer></answer> tags."


def fake_agent(directory: Path, agent_s: float) -> FakeCli:
    return write_fake_cli(
        directory,
        "codex",
        stdout=codex_events("yes"),
        last_message=json.dumps({"final_response": "<answer>yes</answer>", "final_answer": "yes"}),
        sleep=agent_s,
    )


def config(work: Path, fake: FakeCli, concurrency: int, *extra: str) -> TrainerConfig:
    pool = work / "pool.toml"
    pool.write_text(
        "\n".join(
            [
                "[[members]]",
                'kind = "codex"',
                'name = "agent"',
                f"executable = {json.dumps(str(fake.path))}",
                f"max_concurrency = {concurrency}",
                "timeout = 120",
                "[roles]",
                'target = ["agent"]',
                'optimizer = ["agent"]',
            ]
        )
        + "\n"
    )
    return load_trainer_config(
        ROOT / "configs/trainer/qa_demo.toml",
        overrides=[
            f"env.data_dir={json.dumps(str(work / 'data'))}",
            "env.name=qa_exec",
            "env.exec_member=agent",
            "env.rollout_timeout_s=120",
            f"backend.pool_config={json.dumps(str(pool))}",
            *extra,
        ],
    )


async def roll(cfg: TrainerConfig, out: Path, n: int) -> tuple[float, list[dict[str, Any]]]:
    """Wall seconds of ``n`` train rollouts (the executor already open) and their rows."""
    async with open_environment(cfg) as env:
        items = list(env.items(Split.TRAIN))[:n]
        ctx = RunContext(cfg=cfg, env=env, completer=StageCounter(DemoWorld()), run=RunDir(out))
        start = time.perf_counter()
        results = await rollout(ctx, items, SKILL, out / "rollout")
        wall = time.perf_counter() - start
    return wall, [rollout_to_json(r) for r in results]


async def noop(_completer: Any, index: int) -> int:
    return index


async def task_round_trip_s(n: int, in_flight: int) -> float:
    """Mean wall per no-op task through the executor, ``in_flight`` at a time: what the
    executor itself adds to every rollout (submit, schedule, stop, result)."""
    from skillopt.executor.ray_exec import open_ray_executor
    from skillopt.executor.settings import ExecutorKind, ExecutorSettings

    limiter = anyio.CapacityLimiter(in_flight)
    async with open_ray_executor(ExecutorSettings(kind=ExecutorKind.RAY)) as executor:
        await executor.call(noop, -1, completer=DemoWorld())  # warm the workers

        async def one(index: int) -> None:
            async with limiter:
                assert await executor.call(noop, index, completer=DemoWorld()) == index

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for index in range(n):
                tg.start_soon(one, index)
        return (time.perf_counter() - start) * in_flight / n


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def descendants_cpu_seconds() -> float:
    """CPU of this process's living descendants (Ray's servers and workers, and what they
    reaped: the agents), read from /proc before Ray shuts down."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = sum(int(f) for f in fields[11:15]) / tick
    mine, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - mine
        mine |= frontier
    return sum(times[pid] for pid in mine)


def solo_agent_s(fake: FakeCli, work: Path) -> float:
    """One agent run alone, from process start to exit (the bound's unit)."""
    start = time.perf_counter()
    subprocess.run(
        [str(fake.path), "exec", "--json", "-o", str(work / "solo.txt"), "-"],
        input="hi",
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rollouts", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--agent-s", type=float, default=0.3)
    parser.add_argument("--strict", action="store_true", help="exit 1 above the target")
    args = parser.parse_args()
    configure_logging(level="WARNING")
    n, c = args.rollouts, args.concurrency
    try:
        import ray
    except ImportError:
        print("skipped: Ray is not installed (pip install 'skillopt[ray]')")
        return 0
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    with tempfile.TemporaryDirectory(prefix="skillopt-bench-ray-") as tmp:
        work = Path(tmp)
        write_synthetic_qa(work / "data", n, 10, 10, seed=7)
        fake = fake_agent(work / "bin", args.agent_s)
        unit = min(solo_agent_s(fake, work) for _ in range(3))
        bound = math.ceil(n / c) * unit
        load = Load()

        cpu0 = cpu_seconds()
        local_wall, local_rows = anyio.run(roll, config(work, fake, c), work / "local", n)
        local_cpu = cpu_seconds() - cpu0

        with private_network() as (entered, why):
            if not entered:
                print(f"skipped the Ray run: Ray listens on every interface; {why}")
                return 0
            cpu0 = cpu_seconds()
            start = time.perf_counter()
            ray.init(
                address="local",
                num_cpus=c,
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                configure_logging=False,
                log_to_driver=False,
            )
            startup = time.perf_counter() - start
            try:
                ray_cfg = config(work, fake, c, "executor.kind=ray")
                ray_wall, ray_rows = anyio.run(roll, ray_cfg, work / "ray", n)
                ray_cpu = cpu_seconds() - cpu0 + descendants_cpu_seconds()
                round_trip = anyio.run(task_round_trip_s, n, c)
            finally:
                ray.shutdown()

    same = local_rows == ray_rows
    ratio = ray_wall / local_wall
    overhead_ms = (ray_wall - local_wall) * c / n * 1000
    print(f"{n} exec rollouts, {c} in flight, agent {args.agent_s:.2f} s + start-up")
    print(f"bound: ceil({n}/{c}) x {unit:.3f} s (one agent run alone) = {bound:.1f} s")
    print("local pool:")
    print_figures(wall=local_wall, bound=bound, cpu=local_cpu, calls=n, load=load,
                  target=None, indent="  ")  # fmt: skip
    print(
        f"ray ({c} workers): wall {ray_wall:.1f} s, ratio to bound {ray_wall / bound:.2f} "
        f"(ray.init {startup:.1f} s, not counted)"
    )
    print(f"ray / local: {ratio:.2f} (target <= {TARGET}); identical results: {same}")
    print(
        f"executor overhead per rollout: {overhead_ms:.0f} ms from the walls; "
        f"{round_trip * 1000:.1f} ms per no-op task ({c} in flight)"
    )
    print(
        f"cpu per rollout: local {local_cpu / n * 1000:.0f} ms, "
        f"ray {ray_cpu / n * 1000:.0f} ms (with Ray's own servers and workers, start-up included)"
    )
    if not same:
        print("FAIL: the Ray run's results differ from the local run's")
        return 1
    if args.strict and ratio > TARGET:
        print(f"FAIL: ray / local {ratio:.2f} > {TARGET}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
