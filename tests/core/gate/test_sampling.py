"""A lone task's regression must show again on fresh samples before it vetoes a real gain.

The worlds here are functions of (arm, task, sample id): the screening samples and the
confirmation samples can be told apart, so a test can make a regression that is only noise
(it shows on the first samples, never again) and one that is real (it shows on every sample).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

import pytest

from skillopt.gate import GateConfig, decide_paired
from skillopt.gate.paired import paired_test
from skillopt.gate.sampling import REDRAWS, compare_adaptive, confirm_suspects, next_samples
from skillopt.types import GateAction

World = Callable[[int, str, int], float]
GAINERS = [f"gain{i}" for i in range(10)]
SUSPECT = "suspect"
TASKS = [*GAINERS, SUSPECT, *(f"flat{i}" for i in range(29))]


def _config(confirm: int) -> GateConfig:
    return GateConfig(samples_per_task=1, max_samples_per_task=8, confirm_samples=confirm)


async def _compare(world: World, config: GateConfig, offset: int = 0) -> tuple[object, list[int]]:
    asked: list[int] = []

    async def measure(
        arm: int, task_ids: Sequence[str], samples: range
    ) -> tuple[dict[str, list[float]], list[int]]:
        asked.extend(samples)
        return {t: [world(arm, t, k) for k in samples] for t in task_ids}, []

    plan = lambda b, c: next_samples(b, c, config=config)  # noqa: E731
    got = await compare_adaptive(measure, TASKS, config=config, plan=plan, offset=offset)
    decision = decide_paired(
        got.base, got.cand, config=config, task_ids=TASKS, confirm_from=got.confirm_from
    )
    return decision, sorted(set(asked))


def _gainers_fixed(arm: int, task: str) -> float | None:
    if task in GAINERS:
        return float(arm)  # the candidate fixes these on every sample
    if task.startswith("flat"):
        return 1.0
    return None


def noise_on_first_look(arm: int, task: str, k: int) -> float:
    """The suspect task loses its first four candidate samples by chance, never again."""
    fixed = _gainers_fixed(arm, task)
    if fixed is not None:
        return fixed
    return 0.0 if arm == 1 and k % 1000 < 4 else 1.0


def real_regression(arm: int, task: str, k: int) -> float:
    """The candidate breaks the suspect task on every sample."""
    fixed = _gainers_fixed(arm, task)
    if fixed is not None:
        return fixed
    return 0.0 if arm == 1 else 1.0


async def test_noise_on_one_task_no_longer_vetoes_a_clear_gain() -> None:
    vetoed, _ = await _compare(noise_on_first_look, _config(confirm=0))
    assert vetoed.action is GateAction.REJECT, "the first look alone vetoes the gain"
    assert vetoed.arithmetic["regressed_ids"] == [SUSPECT]

    decision, _ = await _compare(noise_on_first_look, _config(confirm=16))
    assert decision.action is GateAction.ACCEPT_NEW_BEST
    assert decision.arithmetic["regressed_ids"] == []
    suspect = next(t for t in decision.arithmetic["per_task"] if t["task_id"] == SUSPECT)
    assert suspect["confirm_pairs"] == 16
    assert suspect["p_confirm"] == 1.0


async def test_a_real_regression_is_confirmed_and_still_vetoes() -> None:
    decision, _ = await _compare(real_regression, _config(confirm=16))
    assert decision.action is GateAction.REJECT
    assert decision.arithmetic["regressed_ids"] == [SUSPECT]
    suspect = next(t for t in decision.arithmetic["per_task"] if t["task_id"] == SUSPECT)
    assert suspect["confirm_pairs"] == 16
    assert suspect["p_confirm"] == pytest.approx(2.0**-16)


async def test_confirmation_samples_are_fresh_ids_after_every_screening_sample() -> None:
    _, asked = await _compare(noise_on_first_look, _config(confirm=16), offset=1000)
    screening = [k for k in asked if k < 1008]
    confirming = [k for k in asked if k >= 1008]
    assert screening == list(range(1000, 1000 + max(screening) - 999))
    assert confirming == list(range(1008, 1024))


async def test_a_candidate_that_fails_on_its_own_draws_no_confirmation() -> None:
    def no_gain(arm: int, task: str, k: int) -> float:
        return 0.0 if task == SUSPECT and arm == 1 else 1.0

    decision, asked = await _compare(no_gain, _config(confirm=16))
    assert decision.action is GateAction.REJECT
    assert max(asked) < 8, "a candidate with no gain is rejected without confirming"


def test_only_a_regression_that_alone_blocks_a_gain_is_a_suspect() -> None:
    config = _config(confirm=16)
    base = {t: [1.0] * 4 for t in TASKS}
    cand = {t: [1.0] * 4 for t in TASKS}
    for t in GAINERS:
        base[t] = [0.0] * 4
    cand[SUSPECT] = [0.0] * 4
    assert confirm_suspects(base, cand, config=config) == [SUSPECT]
    assert confirm_suspects(base, cand, config=_config(confirm=0)) == []
    harmful = {t: [0.0] * 4 for t in TASKS}  # worse overall: rejected without a second look
    assert confirm_suspects(base | {t: [1.0] * 4 for t in GAINERS}, harmful, config=config) == []


def test_confirmed_tasks_are_judged_on_their_fresh_pairs_corrected_over_them() -> None:
    rng = random.Random(5)
    base = {f"t{i}": [1.0] * 24 for i in range(3)}
    cand = {t: [0.0] * 8 + [1.0] * 16 for t in base}  # bad first look, fine after
    cand["t2"] = [0.0] * 8 + [0.0 if rng.random() < 0.9 else 1.0 for _ in range(16)]
    split = dict.fromkeys(base, 8)
    test = paired_test(base, cand, confidence=0.9, confirm_from=split)
    assert test.regressed == ("t2",)
    first_look = paired_test(base, cand, confidence=0.9)
    assert set(first_look.regressed) == {"t0", "t1", "t2"}


# --------------------------------------------------------------------------- missing samples


async def _compare_with(
    world: Callable[[int, str, int, int], float], tasks: Sequence[str]
) -> tuple[object, list[tuple[int, str, int]]]:
    """``world(arm, task, sample id, times asked before)``; the calls made, in order."""
    config = _config(confirm=0)
    asked: list[tuple[int, str, int]] = []

    async def measure(
        arm: int, task_ids: Sequence[str], samples: range
    ) -> tuple[dict[str, list[float]], list[int]]:
        out: dict[str, list[float]] = {}
        for t in task_ids:
            out[t] = []
            for k in samples:
                out[t].append(world(arm, t, k, asked.count((arm, t, k))))
                asked.append((arm, t, k))
        return out, []

    plan = lambda b, c: next_samples(b, c, config=config)  # noqa: E731
    got = await compare_adaptive(measure, list(tasks), config=config, plan=plan)
    decision = decide_paired(
        got.base, got.cand, config=config, task_ids=list(tasks), confirm_from=got.confirm_from
    )
    return decision, asked


FIXED = [f"fixed{i}" for i in range(12)]


async def test_a_sample_whose_call_failed_is_drawn_again_on_its_own_id() -> None:
    def world(arm: int, task: str, k: int, before: int) -> float:
        if arm == 1 and task == "fixed0" and before == 0:
            return math.nan  # the first call fails; asked again, it answers
        return float(arm)

    decision, asked = await _compare_with(world, FIXED)
    assert decision.accepted  # the redrawn sample counts like any other
    assert asked.count((1, "fixed0", 0)) == 2 and asked.count((0, "fixed0", 0)) == 1
    assert "missing_samples" not in decision.arithmetic


async def test_a_sample_still_missing_leaves_the_decision_untested() -> None:
    """A lost call moves no verdict: not to accept (the rest is a clear gain) and not to
    reject (a lost candidate sample read as a failure would be a regression)."""

    def gain(arm: int, task: str, k: int, before: int) -> float:
        return math.nan if (arm, task) == (1, "fixed3") else float(arm)

    decision, asked = await _compare_with(gain, FIXED)
    assert decision.action is GateAction.UNTESTED and not decision.accepted
    assert decision.arithmetic["missing_samples"] == {"fixed3": 1}
    assert asked.count((1, "fixed3", 0)) == 1 + REDRAWS
    assert not decision.blocked_by_regression

    def harm(arm: int, task: str, k: int, before: int) -> float:
        return math.nan if (arm, task) == (0, "fixed3") else float(1 - arm)

    decision, _ = await _compare_with(harm, FIXED)
    assert decision.action is GateAction.UNTESTED


async def test_a_task_no_call_reaches_is_left_out_by_name() -> None:
    def world(arm: int, task: str, k: int, before: int) -> float:
        return math.nan if task == "dead" else float(arm)

    decision, _ = await _compare_with(world, [*FIXED, "dead"])
    assert decision.accepted
    assert decision.arithmetic["unreachable"] == ["dead"]
    assert "dead" not in decision.arithmetic["validated_on"]
