"""Held-out worlds for the lift benchmark: does the night do as well on worlds it was not tuned on?

``bench/lift.py`` measures one world; a rule that only helps there is a defect. This runs
the same nights (same CLI path, same table, same summary lines) on worlds of other shapes,
each built from the pieces of ``bench/lift_world``:

- **wide**: 40 tasks, eight conventions (two of new kinds), four tasks needing three, two
  distinct harmful baits (``lift_world.wide``).
- **crowd**: the lift world seen through ~400 sessions over six weeks: ~30% chatter, 15
  repeated requests with an API key pasted at the end (which must never reach a model),
  truncated JSONL lines, empty session files, two tool outputs of 6 MB (over the
  harvester's 4 MB line cap).
- **noisier**: 30% of target answers flipped. **patchy**: 40% flipped, but only on the
  tasks needing ``migration`` or ``fixtures`` (a model unreliable on some work only).
- **codex** / **claude**: every session written by one agent only.
- **skills**: three project skills of its own (``lift_world.skills``), their sessions
  loading them, and one rule (the time format) the tasks of all three need: 100 % within
  3 nights, the shared rule in memory, nothing misplaced, the learning curve drawn.
- **switch**: the team switches two conventions after two nights, task retirement off
  (``bench/lift_switch.py``: ``--nights`` nights after the new sessions).

    .venv/bin/python bench/lift_variants.py [wide crowd noisier patchy codex claude switch]
        [--nights 3] [--noisy-nights 4] [--seed 11] [--latency 0.02] [--quick] [--keep]
        [--miner llm|heuristic]

Noisier and patchy run only noisy nights (their clean chain is the lift world's). The
default seed (11) differs from ``lift.py``'s (7), so the task wordings and splits are new
as well. Each world prints its table and summary; the exit status is 0 unless the
benchmark itself breaks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lift import Shape, run
from lift_switch import run_switch
from lift_world.history import Oddities
from lift_world.skills import SKILL_SPECS, SKILLS_WORLD
from lift_world.wide import WIDE
from lift_world.world import LIFT

PATCHY_TASKS = frozenset(t.id for t in LIFT.tasks if {"migration", "fixtures"} & set(t.needs))
SHAPES: dict[str, Shape] = {
    "wide": Shape(name="wide", world=WIDE, quick_per_task=(2, 2), quick_chatter=4),
    "crowd": Shape(
        name="crowd",
        per_task=(10, 13),
        chatter=120,
        days=42.0,
        quick_per_task=(4, 6),
        quick_chatter=50,
        odd=Oddities(duplicates=15, truncated=4, empty=2, huge=2, huge_mb=6.0),
    ),
    "noisier": Shape(name="noisier", noise=0.3),
    "patchy": Shape(name="patchy", noise=0.4, noisy_tasks=PATCHY_TASKS),
    "codex": Shape(name="codex", claude_share=0.0),
    "claude": Shape(name="claude", claude_share=1.0),
    "skills": Shape(name="skills", world=SKILLS_WORLD, skills=SKILL_SPECS),
}
NOISY_ONLY = frozenset({"noisier", "patchy"})
OWN_RUNNER = frozenset({"switch"})  # worlds that change between nights: their own runner


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    names = [*SHAPES, *OWN_RUNNER]
    parser.add_argument("worlds", nargs="*", help=f"any of {', '.join(names)} (all)")
    parser.add_argument("--nights", type=int, default=3, help="chained clean nights")
    parser.add_argument("--noisy-nights", type=int, default=4, help="independent noisy nights")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds per model reply")
    parser.add_argument("--seed", type=int, default=11, help="world seed (history and noise)")
    parser.add_argument("--quick", action="store_true", help="smaller histories")
    parser.add_argument("--miner", choices=("llm", "heuristic"), default="llm")
    parser.add_argument(
        "--chain-noise",
        type=float,
        default=0.0,
        help="share of answers flipped in the chained nights too (0 = clean)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    args = parser.parse_args(argv)
    unknown = [w for w in args.worlds if w not in names]
    if unknown:
        parser.error(f"unknown world(s) {', '.join(unknown)}; choose from {', '.join(names)}")
    args.worlds = args.worlds or names
    return args


def lift_args(args: argparse.Namespace, name: str) -> argparse.Namespace:
    """The ``bench/lift.py`` arguments for one world (defaults for what this does not set)."""
    clean = name not in NOISY_ONLY
    return argparse.Namespace(
        nights=args.nights if clean else 0,
        chains=1 if clean else 0,
        noisy_nights=args.noisy_nights,
        latency=args.latency,
        seed=args.seed,
        quick=args.quick,
        json=False,
        miner=args.miner,
        lookback_hours=0.0,
        keep=args.keep,
        chain_noise=args.chain_noise,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict[str, list[str]] = {}
    for name in args.worlds:
        print(f"\n=== {name} ===", flush=True)
        if name == "switch":
            results[name] = run_switch(argparse.Namespace(
                before=2, after=args.nights, latency=args.latency, seed=args.seed,
                quick=args.quick, miner=args.miner, keep=args.keep, newer_wins=False,
            ))  # fmt: skip
            continue
        results[name] = run(lift_args(args, name), SHAPES[name])
    print("\n=== summary ===")
    for name, lines in results.items():
        for line in lines:
            print(f"[{name}] {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
