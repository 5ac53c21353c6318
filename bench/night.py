"""Benchmark one night: 200 mined tasks, K=4, 3 rounds, 4 fake endpoints (8 slots, 300 ms).

The fake server (the world model over HTTP) runs in its own process, so its CPU is not
ours. Prints wall time, the critical-path bound (per stage: max(chain depth,
ceil(calls / total concurrency)) x latency, summed over the dependent stages), the
shared figures of :mod:`figures` (ratio target <= 1.15), model calls by stage and peak RSS
(target < 250 MB).
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from figures import Load, print_figures  # noqa: E402
from skillopt.logging import configure_logging  # noqa: E402
from skillopt.types import ReferenceKind, TaskRecord  # noqa: E402
from skillopt_sleep.config import SleepConfig  # noqa: E402
from skillopt_sleep.mining.tasks_file import write_tasks_file  # noqa: E402
from skillopt_sleep.night.entry import run_night  # noqa: E402
from support.bench_pools import openai_pool  # noqa: E402
from support.world_http import spawn  # noqa: E402

N_TASKS, K, ROUNDS = 200, 4, 3
MEMBERS, SLOTS, LATENCY = 4, 8, 0.3
TEMPLATES = [
    "Where is the {x} handled? Which file is it in?",
    "Fix the failing {x} test",
    "Add a {x} option to the command line",
    "Write the commit message for the {x} change",
    "The {x} page is broken, please fix it",
    "Locate the code that parses the {x}",
    "Prepare the release notes for the {x} feature",
    "Explain how the {x} module is organised",
]
THINGS = [f"{a} {b}" for a in ("cache", "login", "export", "search", "billing") for b in
          ("retry", "config", "parser", "widget", "report")]  # fmt: skip


def tasks() -> list[TaskRecord]:
    out = []
    for i in range(N_TASKS):
        intent = TEMPLATES[i % len(TEMPLATES)].format(x=THINGS[(i // len(TEMPLATES)) % 25])
        intent = f"{intent} (case {i})"
        out.append(TaskRecord(id=f"bench_{i:03d}", intent=intent,
                              reference_kind=ReferenceKind.RUBRIC))  # fmt: skip
    return out


def config(root: Path, port: int) -> SleepConfig:
    os.environ["SKILLOPT_BENCH_KEY"] = "bench-key"
    urls = [f"http://127.0.0.1:{port}/m{i}/v1" for i in range(MEMBERS)]
    pool = openai_pool(urls, SLOTS, member={"api_key_env": "SKILLOPT_BENCH_KEY", "timeout": 60})
    return SleepConfig.model_validate(
        {
            "state_dir": str(root / "state"),
            "skill_path": str(root / "skills" / "bench" / "SKILL.md"),
            "night": {"max_tasks": N_TASKS, "dream_rollouts": K, "rounds": ROUNDS},
            "budget": {"max_calls": 0, "max_tokens": 0},
            "pool": pool,
        }
    )


def bound(stages: list[dict[str, object]]) -> float:
    total_slots = MEMBERS * SLOTS
    seconds = 0.0
    for stage in stages:
        calls = int(stage.get("model_calls") or 0)  # type: ignore[call-overload]
        if not calls:
            continue
        name = str(stage["name"])
        depth = 1 if "reflect" in name else 2  # attempt -> judge chain
        seconds += max(depth, math.ceil(calls / total_slots)) * LATENCY
    return seconds


async def night(cfg: SleepConfig, project: Path, tasks_file: Path) -> object:
    return await run_night(cfg, project=project, tasks_file=tasks_file)


def main() -> None:
    configure_logging(level="WARNING", json=True)
    root = Path(tempfile.mkdtemp(prefix="skillopt-bench-night-"))
    project = root / "project"
    project.mkdir()
    tasks_file = root / "tasks.json"
    write_tasks_file(tasks_file, tasks(), generated_at=__import__("datetime").datetime.now(
        __import__("datetime").UTC))  # fmt: skip
    doc = json.loads(tasks_file.read_text())
    doc["reviewed"] = True
    tasks_file.write_text(json.dumps(doc))
    server, port = spawn(LATENCY)
    try:
        cfg = config(root, port)
        load = Load()
        started, cpu0 = time.perf_counter(), time.process_time()
        outcome = anyio.run(night, cfg, project, tasks_file)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu0
    finally:
        server.terminate()
        server.wait(timeout=10)
    run = json.loads((outcome.run_dir / "run.json").read_text())  # type: ignore[attr-defined]
    stages = run["stages"]
    limit = bound(stages)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    spend = outcome.spend  # type: ignore[attr-defined]
    print(f"night result: {outcome.result.value}, accepted={outcome.accepted}")  # type: ignore[attr-defined]
    print(f"tasks {N_TASKS}, K={K}, rounds={ROUNDS}, members {MEMBERS} x {SLOTS} slots, "
          f"latency {LATENCY * 1000:.0f} ms")  # fmt: skip
    print_figures(wall=wall, bound=limit, cpu=cpu, calls=spend["calls"], load=load, target=1.15)
    print(f"peak RSS            {rss_mb:8.1f} MB (target < 250)")
    print(f"model calls         {spend['calls']} (tokens {spend['tokens']})")
    for stage, calls in sorted(spend["calls_by_stage"].items()):
        print(f"  {stage:<12} {calls}")
    print("per pipeline stage (calls, seconds):")
    for s in stages:
        print(f"  {s['name']:<30} {s.get('model_calls', 0):>6} {s.get('seconds') or 0:8.2f}")


if __name__ == "__main__":
    main()
