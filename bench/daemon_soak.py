"""Soak the demo daemon: its resident memory over many nights must stay flat.

Runs ``skillopt-sleep daemon --demo --every 1`` as a real process (the bundled demo
project, the mock model, a night every second or as soon as the last one ended) and reads
the daemon's resident set size (``VmRSS`` in ``/proc/<pid>/status``, Linux) after each
night it logs. After ``--nights`` nights it sends SIGTERM and checks the daemon exited and
removed its temporary demo directory.

Prints the RSS at a few nights, the least-squares slope over the nights after the warm-up
(imports, the first night's caches and the allocator's arenas settle in the first nights),
and the verdict against the target: at most 0.02 MB a night (2 MB over 100 nights). Before
the daemon emptied a night's text memos and call accounting after each night, the slope
was 0.25 MB a night, up to the memos' bounds (tens of MB).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from figures import Load, as_installed

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
TARGET_MB_PER_NIGHT = 0.02
SHOWN = (1, 10, 20, 50, 100, 200)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares MB per night."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    num = sum((x - mean_x) * (y - mean_y) for x, y in points)
    den = sum((x - mean_x) ** 2 for x, _ in points)
    return num / den if den else 0.0


def soak(nights: int, *, timeout_s: float) -> tuple[list[tuple[int, float]], dict[str, object]]:
    env = {
        **as_installed(os.environ, SRC),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
        "PYTHONUNBUFFERED": "1",
    }
    argv = [sys.executable, "-m", "skillopt_sleep", "daemon", "--demo", "--every", "1"]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    samples: list[tuple[int, float]] = []
    root = ""
    outcomes: dict[str, int] = {}
    deadline = time.monotonic() + timeout_s
    try:
        for line in proc.stderr:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "daemon.demo":
                root = str(event["root"])
            if event.get("event") == "daemon.night":
                outcome = str(event.get("outcome"))
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                samples.append((len(samples) + 1, rss_mb(proc.pid)))
                if len(samples) >= nights or time.monotonic() > deadline:
                    break
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    end = {
        "exit": proc.returncode,
        "outcomes": outcomes,
        "demo_dir_left": bool(root) and Path(root).exists(),
    }
    return samples, end


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=20, help="nights left out of the slope")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds at most")
    args = parser.parse_args()
    if not Path("/proc/self/status").exists():
        print("needs Linux /proc to read the daemon's RSS; skipped")
        return 0
    load = Load()
    started = time.perf_counter()
    samples, end = soak(args.nights, timeout_s=args.timeout)
    wall = time.perf_counter() - started
    if len(samples) <= args.warmup + 2:
        print(f"only {len(samples)} night(s) ran in {wall:.0f} s: nothing to measure")
        return 1
    print(f"{len(samples)} demo nights in {wall:.0f} s (load {load.line()})")
    print(f"night outcomes: {end['outcomes']}; exit {end['exit']} after SIGTERM")
    for night, rss in samples:
        if night in SHOWN or night == len(samples):
            print(f"  after night {night:4d}: RSS {rss:6.1f} MB")
    after = samples[args.warmup :]
    per_night = slope(after)
    growth = after[-1][1] - after[0][1]
    print(
        f"RSS slope over nights {after[0][0]}-{after[-1][0]}: {per_night:+.4f} MB/night "
        f"({growth:+.1f} MB from night {after[0][0]} to {after[-1][0]}); "
        f"target <= {TARGET_MB_PER_NIGHT} MB/night: "
        + ("flat" if per_night <= TARGET_MB_PER_NIGHT else "GROWING")
    )
    print(
        "temporary demo directory after exit: "
        + ("LEFT BEHIND" if end["demo_dir_left"] else "removed")
    )
    ok = per_night <= TARGET_MB_PER_NIGHT and not end["demo_dir_left"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
