"""The night's gate keeps its error rates on a model that flips answers.

A world here is a fold of held-out tasks, each either solved or not under each arm, and a
model that flips 20 % of its answers (a flipped right answer misses one convention and
scores 0.5, a flipped wrong one happens to be right). The gate runs exactly as a night
runs it (:func:`compare_adaptive` with :func:`next_samples` and the confirmation pairs,
then :func:`decide_paired`, the night's default settings), over many seeded worlds:

- an edit that does nothing, or breaks a task, is accepted at most ``alpha`` of the time
  (``gate.confidence`` 0.9: alpha 0.1; these are the rates ``docs/night.md`` quotes);
- an edit that fixes half the fold is accepted nearly always;
- sampling stops early: far fewer pairs than every task at ``max_samples_per_task``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from skillopt.gate import GateConfig, compare_adaptive, decide_paired, next_samples

FLIP = 0.2
FOLD = 8
SEEDS = 400
CONFIG = GateConfig()  # the night's defaults: 1 pair first, up to 8, 16 to confirm, 0.9


def _score(right: bool, rng: random.Random) -> float:
    if rng.random() < FLIP:
        return 0.5 if right else 1.0
    return 1.0 if right else 0.0


async def _gate(base: dict[str, bool], cand: dict[str, bool], seed: int) -> tuple[bool, int]:
    """(accepted, pairs drawn) for one seeded world."""
    rng = random.Random(seed)
    ids = list(base)

    async def measure(
        arm: int, task_ids: Sequence[str], samples: range
    ) -> tuple[dict[str, list[float]], list[None]]:
        right = cand if arm else base
        return {t: [_score(right[t], rng) for _ in samples] for t in task_ids}, []

    plan = lambda b, c: next_samples(b, c, config=CONFIG)  # noqa: E731
    got = await compare_adaptive(measure, ids, config=CONFIG, plan=plan)
    decision = decide_paired(
        got.base, got.cand, config=CONFIG, task_ids=ids, confirm_from=got.confirm_from
    )
    return decision.accepted, sum(len(v) for v in got.base.values())


async def _rate(change: str, n: int) -> tuple[float, float]:
    """(share accepted, mean pairs) of an edit that fixes ``n`` failing tasks ("fix"),
    breaks ``n`` passing ones ("break"), or does nothing (n = 0)."""
    accepted = pairs = 0
    for seed in range(SEEDS):
        layout = random.Random(10_000 + seed)
        base = {f"t{i}": layout.random() < 0.3 for i in range(FOLD)}
        cand = dict(base)
        if change == "fix":
            for t in [t for t, ok in base.items() if not ok][:n]:
                cand[t] = True
        elif change == "break":
            for t in [t for t, ok in base.items() if ok][:n] or list(base)[:1]:
                base[t], cand[t] = True, False
        ok, drawn = await _gate(base, cand, seed)
        accepted += ok
        pairs += drawn
    return accepted / SEEDS, pairs / SEEDS


async def test_an_edit_that_does_nothing_passes_at_most_alpha_of_the_time() -> None:
    share, pairs = await _rate("nothing", 0)
    assert share <= 1.0 - CONFIG.confidence
    assert pairs < FOLD * CONFIG.max_samples_per_task / 2  # stopped early, mostly


async def test_an_edit_that_breaks_a_task_passes_at_most_alpha_of_the_time() -> None:
    share, _ = await _rate("break", 1)
    assert share <= 1.0 - CONFIG.confidence


async def test_an_edit_that_fixes_half_the_fold_is_accepted() -> None:
    share, pairs = await _rate("fix", FOLD // 2)
    assert share >= 0.9
    assert pairs < FOLD * CONFIG.max_samples_per_task
