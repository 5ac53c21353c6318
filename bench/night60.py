"""Benchmark a reviewed 60-task night as a whole process: `skillopt-sleep once --tasks-file`.

30 rubric-judged and 30 rule-checked tasks, one OpenAI-compatible endpoint with 16 slots
answering after ``--latency`` seconds (the world model over HTTP, in its own process so its
CPU is not ours), K = ``--k``. The night runs as ``python -m skillopt_sleep once``, so the
wall time includes process start. The bound is the night's critical path from its own
``run.json``: per stage, max(chain depth, ceil(calls / slots)) x latency, summed. Prints
wall, bound, ratio, the night process's CPU (total and per call), the load average, and the
ratio against max(bound, CPU / cores), so a busy machine can be told from slow code, and
the model-call rounds the night waited through (from the server's arrival times: a request
is one round later than the latest round that had answered when it arrived), in all and
per stage.

    .venv/bin/python bench/night60.py [--k 1] [--latency 0.3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from figures import Load, as_installed, print_figures  # noqa: E402
from skillopt.types import ReferenceKind, RuleCheck, TaskRecord  # noqa: E402
from skillopt_sleep.mining.tasks_file import write_tasks_file  # noqa: E402
from support.world_http import spawn  # noqa: E402

N_RUBRIC, N_RULE, SLOTS = 30, 30, 16
TEMPLATES = [
    "Where is the {x} handled? Which file is it in?",
    "Fix the failing {x} test",
    "Add a {x} option to the command line",
    "Write the commit message for the {x} change",
    "Explain how the {x} module is organised",
]
THINGS = [f"{a} {b}" for a in ("cache", "login", "export", "search", "billing", "upload")
          for b in ("retry", "config", "parser", "widget", "report")]  # fmt: skip


def tasks(n_rubric: int = N_RUBRIC, n_rule: int = N_RULE) -> list[TaskRecord]:
    out = []
    for i in range(n_rubric + n_rule):
        intent = TEMPLATES[i % len(TEMPLATES)].format(x=THINGS[i % len(THINGS)])
        intent = f"{intent} (case {i})"
        if i < n_rubric:
            out.append(TaskRecord(id=f"rubric_{i:02d}", intent=intent))
        else:
            checks = (RuleCheck(op="max_chars", arg=600), RuleCheck(op="no_refusal"))
            out.append(TaskRecord(id=f"rule_{i:02d}", intent=intent, checks=checks,
                                  reference_kind=ReferenceKind.RULE))  # fmt: skip
    return out


def write_config(root: Path, port: int, k: int, n_tasks: int = N_RUBRIC + N_RULE) -> Path:
    path = root / "sleep.toml"
    path.write_text(
        f"""state_dir = "{root / "state"}"
skill_path = "{root / "skills" / "bench" / "SKILL.md"}"

[night]
max_tasks = {n_tasks}
dream_rollouts = {k}

[budget]
max_calls = 0
max_tokens = 0

[[pool.members]]
kind = "openai"
name = "m0"
base_url = "http://127.0.0.1:{port}/m0/v1"
model = "bench"
api_key_env = "SKILLOPT_BENCH_KEY"
max_concurrency = {SLOTS}
timeout = 60

[pool.roles]
target = ["m0"]
optimizer = ["m0"]
""",
        encoding="utf-8",
    )
    return path


def bound(stages: list[dict[str, object]], latency: float) -> float:
    seconds = 0.0
    for stage in stages:
        calls = int(stage.get("model_calls") or 0)  # type: ignore[call-overload]
        if calls:
            depth = 1 if "reflect" in str(stage["name"]) else 2  # attempt -> judge chain
            seconds += max(depth, math.ceil(calls / SLOTS)) * latency
    return seconds


def waves(arrivals: list[float], latency: float) -> list[int]:
    """Per request (by arrival), its model-call round: one more than the latest round
    that had answered before it arrived. The night's rounds are the largest: the dependent
    (or slot-limited) waves it waited through, each at least ``latency`` long."""
    rounds: list[int] = []
    best, j = 0, 0
    for at in arrivals:
        while j < len(arrivals) and arrivals[j] + latency <= at + 0.002:
            best = max(best, rounds[j])
            j += 1
        rounds.append(best + 1)
    return rounds


def stage_rounds(
    stages: list[dict[str, Any]], arrivals: list[float], rounds: list[int]
) -> dict[str, int]:
    """Per stage, how many distinct rounds its requests fell in (by arrival time)."""
    out: dict[str, int] = {}
    for stage in stages:
        if not stage.get("started_at") or not stage.get("ended_at"):
            continue
        lo, hi = (datetime.fromisoformat(stage[k].replace("Z", "+00:00")).timestamp()
                  for k in ("started_at", "ended_at"))  # fmt: skip
        inside = {r for at, r in zip(arrivals, rounds, strict=True) if lo <= at <= hi}
        out[stage["name"]] = len(inside)
    return out


def night_env(config: Path, src: Path) -> dict[str, str]:
    """The night process's environment: this tree, compiled as installed, the bench key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLOPT_SLEEP__")}
    env = as_installed(env, src)
    env.update(SKILLOPT_BENCH_KEY="bench-key", HOME=str(config.parent))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    return env


def night_argv(config: Path, project: Path, tasks_file: Path, profile: Path | None) -> list[str]:
    profiler = ["-m", "cProfile", "-o", str(profile)] if profile else []
    return [sys.executable, *profiler, "-m", "skillopt_sleep", "once", "--json",
            "--config", str(config),
            "--project", str(project), "--tasks-file", str(tasks_file)]  # fmt: skip


def write_inputs(root: Path, n_rubric: int = N_RUBRIC, n_rule: int = N_RULE) -> tuple[Path, Path]:
    """The project directory and the reviewed tasks file of the night (60 tasks unless told)."""
    project = root / "project"
    project.mkdir()
    tasks_file = root / "tasks.json"
    write_tasks_file(tasks_file, tasks(n_rubric, n_rule), generated_at=datetime.now(UTC))
    doc = json.loads(tasks_file.read_text())
    doc["reviewed"] = True
    tasks_file.write_text(json.dumps(doc))
    return project, tasks_file


def run_night(
    config: Path, project: Path, tasks_file: Path, profile: Path | None, src: Path
) -> tuple[float, float, dict[str, Any]]:
    """Wall seconds, CPU seconds of the night process, and its ``--json`` outcome."""
    env = night_env(config, src)
    argv = night_argv(config, project, tasks_file, profile)
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"the night failed with exit code {proc.returncode}: {out[-2000:]!r}")
    outcome: dict[str, Any] = json.loads(out)
    return wall, usage.ru_utime + usage.ru_stime, outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--k", type=int, default=1, help="dream rollouts per task")
    parser.add_argument("--latency", type=float, default=0.3, help="seconds per reply")
    parser.add_argument("--profile", type=Path, help="write the night's cProfile stats here")
    parser.add_argument(
        "--tasks",
        type=int,
        default=N_RUBRIC + N_RULE,
        help="tasks in the night, half rubric-judged (a smaller night shows the fixed CPU)",
    )
    parser.add_argument(
        "--src",
        type=Path,
        default=ROOT / "src",
        help="source tree to run (compare)",
    )
    args = parser.parse_args()
    load = Load()
    root = Path(tempfile.mkdtemp(prefix="skillopt-bench-night60-"))
    n_rubric = args.tasks // 2
    n_rule = args.tasks - n_rubric
    project, tasks_file = write_inputs(root, n_rubric, n_rule)
    timeline = root / "arrivals.json"
    server, port = spawn(args.latency, timeline)
    try:
        wall, cpu, outcome = run_night(
            write_config(root, port, args.k, args.tasks),
            project,
            tasks_file,
            args.profile,
            args.src,
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    run_json = Path(outcome["run_dir"]) / "run.json"
    stages = json.loads(run_json.read_text())["stages"]
    arrivals = json.loads(timeline.read_text())
    rounds = waves(arrivals, args.latency) if args.latency > 0 else []
    per_stage = stage_rounds(stages, arrivals, rounds) if rounds else {}  # no rounds at L=0
    limit = bound(stages, args.latency)
    calls = int(outcome["spend"]["calls"])
    print(f"night {outcome['result']}, tasks {n_rubric} rubric + {n_rule} rule, K={args.k}, "
          f"1 endpoint x {SLOTS} slots, latency {args.latency * 1000:.0f} ms")  # fmt: skip
    print_figures(wall=wall, bound=limit, cpu=cpu, calls=calls, load=load, target=1.15)
    n_rounds = max(rounds, default=0)
    print(f"model-call rounds   {n_rounds:8d}   ({n_rounds} x {args.latency * 1000:.0f} ms = "
          f"{n_rounds * args.latency:.2f} s waited on the server; the slots alone need "
          f"ceil({calls}/{SLOTS}) = {math.ceil(calls / SLOTS)})")  # fmt: skip
    print("per pipeline stage (calls, seconds, rounds):")
    for s in stages:
        print(f"  {s['name']:<30} {s.get('model_calls', 0):>6} {s.get('seconds') or 0:8.2f} "
              f"{per_stage.get(s['name'], 0):>4}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
