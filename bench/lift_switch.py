"""The team changes its mind: does learning keep up when two conventions switch? (issue 22)

The lift world (``bench/lift_world/switch.py``) through the same CLI path as
``bench/lift.py``, with task retirement switched off (``night.retire_after_passes = 0``):
``--before`` nights on three weeks of history that ended three days ago, then the team
switches time formats and where release notes go: new sessions over the last two days
correct the agent toward the new style (every request twice, except three never asked
again), and ``--after`` more nights run. Per night: the true score (before the switch by
the old conventions, after it by the new ones), whether a document holds an old and a new
line of one switched convention, the harmful rule, and the tasks the night superseded.

``--newer-wins``: the agent follows the new line when a document holds both, and
reflection adds the new rule before replacing the old one (the issue's model, on which an
``add`` alone passes while the old line stays in the other document).

Targets: >= 92% under the new conventions on the first or second night after the new
sessions, no document ever holding both styles, the harmful rule never adopted, and the
report saying what was superseded and why.

    .venv/bin/python bench/lift_switch.py [--before 2] [--after 3] [--seed 11] [--quick]
                                          [--newer-wins] [--latency 0.02] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lift import HEADER, Night, Shape, _read, row, run_night, setup, verdict
from lift_world.switch import (
    SWITCH,
    SwitchModel,
    both_styles,
    switch_score,
    twice,
    write_switch_sessions,
)
from support.fake_model_server import FakeModelServer

SHAPE = Shape(name="switch", world=SWITCH)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--before", type=int, default=2, help="nights before the switch")
    parser.add_argument("--after", type=int, default=3, help="nights after the new sessions")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds per model reply")
    parser.add_argument("--seed", type=int, default=11, help="world seed")
    parser.add_argument("--quick", action="store_true", help="a smaller history")
    parser.add_argument("--miner", choices=("llm", "heuristic"), default="llm")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--newer-wins", action="store_true",
        help="the agent follows the new line when a document holds both (and reflection "
        "adds the new rule before replacing the old one)",
    )  # fmt: skip
    return parser.parse_args(argv)


def run_switch(args: argparse.Namespace) -> list[str]:
    """The nights before and after the switch; the summary lines."""
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="skillopt-bench-switch-"))
    model = SwitchModel(newer_wins=args.newer_wins)
    server = FakeModelServer(latency=args.latency, reply_fn=model.reply)
    now = datetime.now(UTC)
    args.lookback_hours = 0.0
    before: list[Night] = []
    after: list[Night] = []
    both: list[tuple[int, list[str]]] = []
    status_lines: list[str] = []
    try:
        server.start()
        lab = setup(args, root / "world1", args.seed, server, model, SHAPE,
                    now=now - timedelta(days=3))  # fmt: skip
        lab.env["SKILLOPT_SLEEP__NIGHT__RETIRE_AFTER_PASSES"] = "0"
        print(f"world switch: {len(SWITCH.tasks)} tasks; {lab.history.sessions} sessions "
              f"until {lab.history.newest:%Y-%m-%d %H:%M}; retirement off")  # fmt: skip
        print(HEADER)
        for n in range(1, args.before + 1):
            night = run_night(lab, "before", n, noise=0.0, seed=args.seed * 1000 + n)
            before.append(night)
            print(row(night))
        model.era = 1
        new = write_switch_sessions(
            lab.home, lab.project, start=now - timedelta(days=2), end=now - timedelta(hours=1),
            seed=args.seed,
        )  # fmt: skip
        print(f"-- the team switched: {new.written} new sessions about {len(new.tasks)} "
              f"requests since {new.oldest:%Y-%m-%d} (3 requests never asked again)")  # fmt: skip
        for n in range(args.before + 1, args.before + args.after + 1):
            night = run_night(lab, "after", n, noise=0.0, seed=args.seed * 1000 + n)
            skill, memory = _read(lab.skill), _read(lab.memory)
            score = switch_score(skill, memory, newer_wins=args.newer_wins)
            night.solved, night.present = score.solved, sorted(score.present)
            styles = both_styles(skill, memory) + [f"{k} twice" for k in twice(skill, memory)]
            both.append((n, styles))
            after.append(night)
            print(row(night) + (f"  BOTH STYLES: {', '.join(styles)}" if styles else ""))
            for mark in night.superseded:
                print(f"        superseded {mark['task_id']}: {mark['why']}")
        _, status = lab.cli("status", log="after-status")
        status_lines = list(((status or {}).get("archive") or {}).get("supersessions") or [])
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return summary(before, after, both, status_lines, time.perf_counter() - started)


def summary(
    before: list[Night], after: list[Night], both: list[tuple[int, list[str]]],
    status_lines: list[str], wall: float,
) -> list[str]:  # fmt: skip
    early = after[:2]
    best = max((n.score for n in early), default=0.0)
    mixed = [f"night {n} ({', '.join(s)})" for n, s in both if s]
    harmful = sum(n.harmful_adopted for n in [*before, *after])
    superseded = sum(len(n.superseded) for n in after)
    return [
        "before the switch (old conventions): " + " ".join(f"{n.score:.0%}" for n in before),
        "after the switch (new conventions): " + " ".join(f"{n.score:.0%}" for n in after),
        f">= 92% on the first or second night after the new sessions: {verdict(best >= 0.92)} "
        f"(best {best:.0%})",
        f"no document holding an old and a new line, no rule twice: {verdict(not mixed)}"
        + (f" ({'; '.join(mixed)})" if mixed else ""),
        f"harmful rule adopted: {harmful} night(s) (target 0): {verdict(not harmful)}",
        f"superseded tasks reported: {superseded} (the report says which and why): "
        f"{verdict(superseded > 0)}",
        *(f"status: {line}" for line in status_lines),
        f"calls per night after the switch: {[n.calls for n in after]}; wall {wall:.1f} s",
    ]


def main(argv: list[str] | None = None) -> int:
    lines = run_switch(parse_args(argv))
    print()
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
