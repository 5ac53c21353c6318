"""Attribution of a failing bundle by halves when it has many edits: the spoilers found in
fewer tests than leaving each out, at a confidence corrected over every test it may make."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from skillopt.gate import (
    GateConfig,
    attribute,
    bonferroni,
    cancelled_tasks,
    decide_paired,
    planned_tests,
)
from skillopt.gate.attribution import SPLIT_FROM, on_the_whole
from skillopt.types import GateAction, GateDecision


class Spoilers:
    """``compare``: the bundle without a group is better when the group holds a spoiler;
    with ``false_rate``, a group without one is also called better that often."""

    def __init__(self, bad: set[int], *, false_rate: float = 0.0, seed: int = 0) -> None:
        self.bad = bad
        self.false_rate = false_rate
        self.rng = random.Random(seed)
        self.confidences: list[float] = []

    async def build(self, rest: Sequence[int]) -> frozenset[int]:
        return frozenset(rest)

    async def compare(
        self,
        whole: frozenset[int],
        without: frozenset[int],
        config: GateConfig,
        left_out: tuple[int, ...],
    ) -> GateDecision:
        assert set(left_out) == set(whole - without)
        self.confidences.append(config.confidence)
        removed = whole - without
        better = bool(removed & self.bad) or self.rng.random() < self.false_rate
        action = GateAction.ACCEPT_NEW_BEST if better else GateAction.REJECT
        return GateDecision(action=action, accepted=better, baseline=0.0, candidate=0.0, delta=0.0)


async def _search(n: int, world: Spoilers, config: GateConfig | None = None) -> tuple[int, ...]:
    edits = list(range(n))
    found = await attribute(
        frozenset(edits), edits, build=world.build, compare=world.compare,
        config=config or GateConfig(),
    )  # fmt: skip
    return found.dropped


async def test_a_few_edits_are_left_out_one_at_a_time() -> None:
    world = Spoilers({1})
    assert await _search(3, world) == (1,)
    assert len(world.confidences) == 3 == planned_tests(3)


async def test_many_edits_are_searched_by_halves_in_fewer_tests() -> None:
    for n in (SPLIT_FROM, 8, 12, 16):
        for spoiler in range(n):
            world = Spoilers({spoiler})
            assert await _search(n, world) == (spoiler,)
            assert len(world.confidences) < n
            assert set(world.confidences) == {bonferroni(0.9, planned_tests(n))}
    world = Spoilers({2, 13})  # in different halves: both found
    assert await _search(16, world) == (2, 13)
    assert len(world.confidences) <= planned_tests(16)


@pytest.mark.slow
async def test_noise_alone_drops_a_good_edit_no_more_often_than_alpha() -> None:
    """Every test errs at most at alpha / planned_tests(n) (what the corrected confidence
    grants it): over seeded searches among good edits only, the share that drops any edit
    stays at most alpha, up to three standard errors of the simulation."""
    alpha, runs = 0.1, 1500
    slack = 3 * (alpha * (1 - alpha) / runs) ** 0.5
    for n in (3, 8, 16):
        dropped = 0
        for seed in range(runs):
            world = Spoilers(set(), false_rate=alpha / planned_tests(n), seed=seed)
            dropped += bool(await _search(n, world))
        assert dropped / runs <= alpha + slack


def test_a_removal_is_judged_on_what_the_edits_left_in_promised() -> None:
    """The lost tasks a removal is judged on: those where an edit still in the bundle
    improved more alone than the removed edits did. Edit 0 improved a by .5 and b by .25,
    edit 1 b by .5 and c, edit 2 nothing."""
    promised = [{"a": 0.5, "b": 0.25}, {"c": 1.0, "b": 0.5}, {}]
    lost = ["a", "b", "c"]
    assert cancelled_tasks((0,), lost, promised) == ["b", "c"]  # a: 0's own gain
    assert cancelled_tasks((1,), lost, promised) == ["a"]  # b: 1 promised more than 0
    assert cancelled_tasks((2,), lost, promised) == ["a", "b", "c"]
    assert cancelled_tasks((0, 1), lost, promised) == []


async def test_nothing_to_compare_on_keeps_the_edit_untested() -> None:
    """A removal with nothing to compare on (compare says None) drops nothing and is
    recorded as no test, one by one and by halves alike."""
    for n in (3, 8):
        found, asked = await _search_with_nothing_to_compare(n)
        assert found == () and asked


async def _search_with_nothing_to_compare(n: int) -> tuple[tuple[int, ...], int]:
    asked = 0

    async def build(rest: Sequence[int]) -> frozenset[int]:
        return frozenset(rest)

    async def compare(
        whole: frozenset[int], without: frozenset[int], config: GateConfig,
        left_out: tuple[int, ...],
    ) -> GateDecision | None:  # fmt: skip
        nonlocal asked
        asked += 1
        return None

    found = await attribute(
        frozenset(range(n)), list(range(n)), build=build, compare=compare, config=GateConfig()
    )
    assert found.tests == ()
    return found.dropped, asked


async def test_a_removal_is_judged_on_the_whole_not_vetoed_by_one_task() -> None:
    """Without the spoiler two tasks gain fully and one loses a little (the spoiler's own
    credit on it): the removal is significant on the whole, so the spoiler is dropped,
    though a candidate for adoption with that regressed task would be rejected."""
    config = GateConfig()
    whole = {"t1": [0.375] * 8, "t2": [0.3335] * 8, "t3": [0.375] * 24}
    without = {"t1": [1.0] * 8, "t2": [1.0] * 8, "t3": [0.25] * 24}

    async def compare(
        w: frozenset[int], rest: frozenset[int], cfg: GateConfig, left_out: tuple[int, ...]
    ) -> GateDecision:
        if left_out == (0,):
            return decide_paired(whole, without, config=cfg, task_ids=list(whole))
        return decide_paired(whole, whole, config=cfg, task_ids=list(whole))

    async def build(rest: Sequence[int]) -> frozenset[int]:
        return frozenset(rest)

    adopting = decide_paired(whole, without, config=config, task_ids=list(whole))
    assert not adopting.accepted and adopting.arithmetic["regressed_ids"] == ["t3"]
    found = await attribute(frozenset({0, 1}), [0, 1], build=build, compare=compare,
                            config=config)  # fmt: skip
    assert found.dropped == (0,)
    assert "on_the_whole" in found.decisions[0].arithmetic
    # a removal with a sample missing is not judged on the whole: it stays untested
    gap = {**without, "t1": [1.0] * 7 + [float("nan")]}
    partial = on_the_whole(decide_paired(whole, gap, config=config, task_ids=list(whole)))
    assert partial is not None and not partial.accepted
