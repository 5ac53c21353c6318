"""Harvest speed and memory on a synthetic transcript tree (Claude Code + Codex).

    .venv/bin/python bench/harvest.py [--sessions 2000] [--turns 20]

Prints sessions/s, MB/s and the peak traced Python memory for a full scan and for a
cursor-limited scan (the nightly case: most files are older than the cursor).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this tree, not the venv's
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from figures import Load, print_figures
from skillopt_sleep.harvest import SourceKind, SourceSpec, harvest
from support.transcripts import Turn, write_claude_session, write_codex_session

TARGET_S = 4.0  # a full scan of 2000 sessions on a quiet machine (issue 14)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    start = datetime(2026, 11, 1, tzinfo=UTC)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        claude, codex, project = root / "claude", root / "codex", root / "proj"
        turns = [
            Turn(user=f"Request {i}: refactor module {i} and add tests " + "ctx " * 60,
                 answer="Done. " + "detail " * 150, tools=["Read", "Edit", "Bash"])
            for i in range(args.turns)
        ]  # fmt: skip
        for i in range(args.sessions):
            when = start + timedelta(minutes=10 * i)
            writer = write_claude_session if i % 2 else write_codex_session
            writer(claude if i % 2 else codex, cwd=project, turns=turns, start=when)
        total = sum(p.stat().st_size for p in root.rglob("*.jsonl"))
        specs = [
            SourceSpec(kind=SourceKind.CLAUDE_CODE, home=claude),
            SourceSpec(kind=SourceKind.CODEX, home=codex),
        ]
        cursor = start + timedelta(minutes=10 * (args.sessions - 50))
        for label, since in (("full scan", None), ("nightly (50 new)", cursor)):
            load = Load()
            began, cpu0 = time.perf_counter(), time.process_time()
            result = harvest(specs, since=since, project=project, limit=args.sessions)
            elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu0
            tracemalloc.start()
            harvest(specs, since=since, project=project, limit=args.sessions)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            read = result.diagnostics.files_read
            size = sum(p.stat().st_size for p in root.rglob("*.jsonl") if since is None)
            print(
                f"{label}: {len(result.digests)} sessions from {read} files in {elapsed:.2f}s "
                f"({read / elapsed:.0f} files/s, {size / 1e6 / elapsed:.1f} MB/s), "
                f"peak traced memory {peak / 1e6:.1f} MB"
            )
            # No latency to wait for: the bound is the target, scaled to the sessions read
            # (one thread, so CPU / 1 core is as fast as this work could have run).
            bound = TARGET_S * max(read, 1) / 2000
            print_figures(wall=elapsed, bound=bound, cpu=cpu, calls=0, load=load, target=1.0,
                          cores=1, bound_label="target (4 s / 2000)", indent="  ")  # fmt: skip
        print(f"tree: {args.sessions} sessions x {args.turns} turns, {total / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
