"""Benchmark start-up: what `skillopt-sleep once --help`, `status --json` and `once --demo` import,
how long `--help` of every command takes, and how long a night takes from exec to its first
model request.

Each command runs as a real process, first under ``python -X importtime`` (import time by
top-level package, and whether the HTTP stack or the scheduler was loaded), then a few times
plain for wall and CPU. The bound is the issue's target (0.25 s for ``once --help`` and for
``status --json``); the floor is a bare interpreter start on this machine. Prints wall
(median), bound, ratio, CPU seconds, the load average, and the ratio against
max(bound, CPU), so a busy machine can be told from slow code.

`--help` of every command (issue 32: `once --help` had grown to 0.7 s because building its
parser imported the pydantic config): each command's help, median wall and mean CPU, against
0.15 s; the slowest is printed with the shared figures.

Exec to first request: the 60-task reviewed night of ``bench/night60.py`` (K=1) against the
world model over HTTP (``tests/support/world_http.py``, in its own process, answering at
once); the figure is the server's arrival time of the night's first request minus the time
just before the night process was started (both ``time.time()``), median of ``--runs``.
Target 0.4 s (issue 14).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from figures import Load, as_installed, print_figures

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # support.world_http, the model server
HEAVY = ("openai", "httpx2", "apscheduler")
BOUND_S = 0.25
HELP_BOUND_S = 0.15
FIRST_REQUEST_S = 0.4


SRC = ROOT / "src"


def _env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    return {**as_installed(os.environ, SRC), "PYTHONPATH": path}


def _children_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def timed(argv: list[str], runs: int) -> tuple[float, float]:
    """Median wall and mean CPU (user + sys) of ``runs`` runs of ``argv``."""
    env = _env()
    walls, cpu_before = [], _children_cpu()
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=True)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls), (_children_cpu() - cpu_before) / runs


def imports(argv: list[str]) -> tuple[float, Counter[str], list[str]]:
    """Total import seconds, seconds per top-level package, heavy packages loaded."""
    done = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], env=_env(), capture_output=True, text=True
    )
    by_package: Counter[str] = Counter()
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        _, self_us, _, name = (part.strip() for part in line.replace(":", "|", 1).split("|"))
        by_package[name.split(".")[0]] += int(self_us) / 1e6
    heavy = sorted(p for p in by_package if p in HEAVY)
    return sum(by_package.values()), by_package, heavy


def report(label: str, argv: list[str], runs: int, *, bound: float | None) -> None:
    load = Load()
    total, by_package, heavy = imports(argv)
    wall, cpu = timed(argv, runs)
    top = ", ".join(f"{name} {sec * 1000:.0f}" for name, sec in by_package.most_common(6))
    print(f"{label}")
    print(f"  imports {total:.3f} s (ms by package: {top})")
    print(f"  heavy packages loaded: {', '.join(heavy) or 'none'}")
    if bound is None:
        print(f"  wall {wall:.3f} s  CPU {cpu:.3f} s")
        return
    # one process, one thread doing the work: CPU / 1 core is its floor
    print_figures(wall=wall, bound=bound, cpu=cpu, calls=0, load=load, target=1.0,
                  cores=1, bound_label="target", indent="  ")  # fmt: skip


def every_help(cli: list[str], runs: int) -> None:
    """``--help`` of every command, each against :data:`HELP_BOUND_S`."""
    load = Load()
    modules = (SRC / "skillopt_sleep" / "commands").glob("[!_]*.py")  # one per command
    names = [m.stem.removesuffix("_cmd").replace("_", "-") for m in modules]
    print(f"--help of every command (target {HELP_BOUND_S:g} s each)")
    measured = {name: timed([*cli, name, "--help"], runs) for name in sorted(names)}
    for name, (wall, cpu) in measured.items():
        print(f"  {name:<12} wall {wall:.3f} s  CPU {cpu:.3f} s  ratio {wall / HELP_BOUND_S:.2f}")
    slowest = max(measured, key=lambda n: measured[n][0])
    wall, cpu = measured[slowest]
    print(f"  slowest: {slowest} --help")
    print_figures(wall=wall, bound=HELP_BOUND_S, cpu=cpu, calls=0, load=load, target=1.0,
                  cores=1, bound_label="target", indent="  ")  # fmt: skip


def first_request(runs: int) -> None:
    """Exec of ``once`` to the first request's arrival at the model server (median)."""
    import json

    import night60
    from support.world_http import spawn

    load = Load()
    gaps, cpus, walls = [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="bench-first-request-") as tmp:
            root = Path(tmp)
            project, tasks_file = night60.write_inputs(root)
            timeline = root / "arrivals.json"
            server, port = spawn(0.0, timeline)
            try:
                config = night60.write_config(root, port, 1)
                env = night60.night_env(config, SRC)
                argv = night60.night_argv(config, project, tasks_file, None)
                cpu_before = _children_cpu()
                started = time.time()
                subprocess.run(argv, env=env, capture_output=True, check=False)
                walls.append(time.time() - started)
                cpus.append(_children_cpu() - cpu_before)
            finally:
                server.terminate()
                server.wait(timeout=10)
            arrivals = json.loads(timeline.read_text())
            if not arrivals:
                raise SystemExit("the night sent no model request")
            gaps.append(arrivals[0] - started)
    gap = statistics.median(gaps)
    print("exec to first model request (60-task night, K=1, instant server)")
    print(f"  runs {', '.join(f'{g:.3f}' for g in gaps)} s; whole night median "
          f"{statistics.median(walls):.2f} s, CPU {statistics.median(cpus):.2f} s")  # fmt: skip
    print("  (the CPU spent up to the first request is not seen from outside: 0 below)")
    print_figures(wall=gap, bound=FIRST_REQUEST_S, cpu=0.0, calls=0, load=load, target=1.0,
                  cores=1, bound_label="target", indent="  ")  # fmt: skip


def main() -> int:
    global SRC
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="timed runs per command")
    parser.add_argument("--src", type=Path, default=SRC, help="source tree to run (compare)")
    args = parser.parse_args()
    SRC = args.src
    py = sys.executable
    print(f"load average {os.getloadavg()[0]:.2f} (cores {os.cpu_count()})")
    floor, floor_cpu = timed([py, "-c", "pass"], args.runs)
    print(f"bare interpreter: wall {floor:.3f} s  CPU {floor_cpu:.3f} s")
    cli = [py, "-m", "skillopt_sleep"]
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        state = Path(tmp) / "state"
        report("once --help", [*cli, "once", "--help"], args.runs, bound=BOUND_S)
        night = [*cli, "once", "--demo", "--state-dir", str(state), "--json"]
        report("once --demo (a whole mock night)", night, 1, bound=None)
        demo = ["--config", str(state / "demo" / "sleep.toml")]
        demo += ["--project", str(state / "demo" / "demo-project")]
        report("status --json", [*cli, "status", *demo, "--json"], args.runs, bound=BOUND_S)
    every_help(cli, args.runs)
    first_request(args.runs)
    print(f"load average {os.getloadavg()[0]:.2f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
