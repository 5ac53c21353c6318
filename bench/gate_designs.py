"""How the night's paired gate compares with sequential designs it could have used (issue 21).

A world is a fold of held-out tasks, each solved or not under each arm, and a model that
flips ``--flip`` of its answers (a flipped right answer misses one convention and scores
0.5; a flipped wrong one happens to be right). Each design samples the two arms wave by
wave, then the gate decides (:func:`skillopt.gate.decide_paired`, the confirmation pairs
included); over ``--seeds`` seeded worlds per change it prints the share accepted and the
calls drawn (both arms). Changes: nothing, break 1 task, fix 3 and break 2, fix 2/4/6.

Designs:

- ``today``: the gate's own plan (:func:`skillopt.gate.next_samples`), waves 1, 4, 8 pairs;
- ``waves1248``: the same plan with a look at 2 pairs too;
- ``futile``: waves 1, 2, 4, 8 and a candidate no better than chance (p > 0.5) dropped
  from the second wave on;
- ``lost_only``: once the gain is significant, only the tasks that lost a pair sampled again;
- ``evalue``: an anytime-valid test: wealth bets ``1 + lam * delta`` on every pair, averaged
  over a grid of ``lam``; the gate must also see the wealth reach ``1 / alpha`` (Ville's
  inequality: a useless edit gets there at most ``alpha`` of the time, however often one
  looks); sampled where samples disagree until the wealth is reached, falls to a tenth,
  or cannot be reached any more.

    .venv/bin/python bench/gate_designs.py [--seeds 300] [--flip 0.2] [--tasks 8 24]
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Callable, Mapping, Sequence

from skillopt.gate import (
    GateConfig,
    confirm_suspects,
    decide_paired,
    next_samples,
    paired_test,
    task_settled,
)

Scores = Mapping[str, list[float]]
Plan = Callable[[Scores, Scores], list[str]]
CONFIG = GateConfig()
ALPHA = 1.0 - CONFIG.confidence
LAMBDAS = (0.2, 0.4, 0.6, 0.8)
CHANGES = ("nothing", "break1", "mixed", "fix2", "fix4", "fix6")


def wealth(deltas: Sequence[float]) -> float:
    """The e-value of "the candidate gains" over paired deltas (grid-averaged bets)."""
    logs = [math.fsum(math.log(1.0 + lam * d) for d in deltas) for lam in LAMBDAS]
    return math.fsum(math.exp(v) for v in logs) / len(LAMBDAS)


def _deltas(base: Scores, cand: Scores) -> dict[str, list[float]]:
    return {t: [c - b for b, c in zip(base[t], cand[t], strict=False)] for t in base}


def _lost(base: Scores, cand: Scores) -> list[str]:
    return [t for t, ds in _deltas(base, cand).items() if any(d < 0 for d in ds)]


def _open(base: Scores, cand: Scores) -> list[str]:
    return [t for t in base if not task_settled(base[t], cand[t])]


def today(base: Scores, cand: Scores) -> list[str]:
    return next_samples(base, cand, config=CONFIG)


def futile(base: Scores, cand: Scores) -> list[str]:
    test = paired_test(base, cand, confidence=CONFIG.confidence)
    if not test.passed and test.p_improve > 0.5:
        return []
    return today(base, cand)


def lost_only(base: Scores, cand: Scores) -> list[str]:
    test = paired_test(base, cand, confidence=CONFIG.confidence)
    return _lost(base, cand) if test.passed else today(base, cand)


def evalue(base: Scores, cand: Scores) -> list[str]:
    test = paired_test(base, cand, confidence=CONFIG.confidence)
    if test.untested or test.harmful:
        return []
    every = [d for ds in _deltas(base, cand).values() for d in ds]
    if test.gains and wealth(every) >= 1.0 / ALPHA:
        return _lost(base, cand)
    room = sum(CONFIG.max_samples_per_task - len(base[t]) for t in _open(base, cand))
    if wealth(every) <= 0.1 or wealth([*every, *([1.0] * room)]) < 1.0 / ALPHA:
        return []
    return _open(base, cand)


DESIGNS: dict[str, tuple[Plan, tuple[int, ...]]] = {
    "today": (today, (1, 4, 8)),
    "waves1248": (today, (1, 2, 4, 8)),
    "futile": (futile, (1, 2, 4, 8)),
    "lost_only": (lost_only, (1, 4, 8)),
    "evalue": (evalue, (1, 2, 4, 8)),
}


def _score(right: bool, rng: random.Random, flip: float) -> float:
    if rng.random() < flip:
        return 0.5 if right else 1.0
    return 1.0 if right else 0.0


def run(design: str, base_ok: dict[str, bool], cand_ok: dict[str, bool], seed: int,
        flip: float) -> tuple[bool, int]:  # fmt: skip
    plan, waves = DESIGNS[design]
    rng = random.Random(seed)
    base: dict[str, list[float]] = {t: [] for t in base_ok}
    cand: dict[str, list[float]] = {t: [] for t in base_ok}

    def wave(tasks: Sequence[str], upto: int) -> None:
        for t in tasks:
            while len(base[t]) < upto:
                base[t].append(_score(base_ok[t], rng, flip))
                cand[t].append(_score(cand_ok[t], rng, flip))

    wave(list(base), waves[0])
    for upto in waves[1:]:
        todo = [t for t in plan(base, cand) if len(base[t]) < upto]
        if not todo:
            break
        wave(todo, upto)
    confirm: dict[str, int] = {}
    for t in confirm_suspects(base, cand, config=CONFIG):
        confirm[t] = len(base[t])
        wave([t], len(base[t]) + CONFIG.confirm_samples)
    decision = decide_paired(base, cand, config=CONFIG, task_ids=list(base), confirm_from=confirm)
    accepted = decision.accepted
    if design == "evalue":
        screened = [d for t, ds in _deltas(base, cand).items() for d in ds[: confirm.get(t)]]
        accepted = accepted and wealth(screened) >= 1.0 / ALPHA
    return accepted, 2 * sum(len(v) for v in base.values())


def world(change: str, n: int, seed: int) -> tuple[dict[str, bool], dict[str, bool]]:
    layout = random.Random(10_000 + seed)
    base = {f"t{i}": layout.random() < 0.3 for i in range(n)}
    cand = dict(base)
    failing = [t for t, ok in base.items() if not ok]
    passing = [t for t, ok in base.items() if ok]
    fixes = {"mixed": 3}.get(change, int(change[3:]) if change.startswith("fix") else 0)
    breaks = {"mixed": 2, "break1": 1}.get(change, 0)
    for t in failing[:fixes]:
        cand[t] = True
    for t in passing[:breaks]:
        cand[t] = False
    return base, cand


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seeds", type=int, default=300)
    parser.add_argument("--flip", type=float, default=0.2)
    parser.add_argument("--tasks", type=int, nargs="+", default=[8, 24])
    parser.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=list(DESIGNS))
    args = parser.parse_args()
    for n in args.tasks:
        print(f"fold of {n} tasks, {args.flip:.0%} flips, {args.seeds} worlds per change:")
        print(f"  {'change':<8}" + "".join(f"{d:>22}" for d in args.designs))
        total = dict.fromkeys(args.designs, 0.0)
        for change in CHANGES:
            cells = []
            for d in args.designs:
                got = [run(d, *world(change, n, s), s, args.flip) for s in range(args.seeds)]
                share = sum(a for a, _ in got) / args.seeds
                calls = sum(c for _, c in got) / args.seeds
                total[d] += calls
                cells.append(f"{share:>8.1%} {calls:>7.1f} calls")
            print(f"  {change:<8}" + "".join(f"{c:>22}" for c in cells))
        print(f"  {'calls':<8}" + "".join(f"{total[d]:>22.0f}" for d in args.designs))


if __name__ == "__main__":
    main()
