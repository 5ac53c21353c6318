"""The paired gate: sign-flip statistics, verdicts and the decision's recorded arithmetic."""

from __future__ import annotations

import math
import random

import pytest

from skillopt.gate import GateConfig, decide_paired
from skillopt.gate.paired import paired_test, sign_flip_p, task_settled
from skillopt.types import GateAction


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1, 1, 1, 1], 1 / 16),
        ([1, 1, 1], 1 / 8),
        ([1, -1, 1, 1], 5 / 16),  # sums >= 2: {+4, +2 (x4)}
        ([0, 0, 0], 1.0),
        ([], 1.0),
        ([-1, -1], 1.0),
        ([0.5, 0.25], 1 / 4),
    ],
)
def test_sign_flip_p_is_exact_for_small_sets(values: list[float], expected: float) -> None:
    assert sign_flip_p(values) == pytest.approx(expected)


def test_sign_flip_p_falls_back_to_the_normal_form_for_many_distinct_values() -> None:
    rng = random.Random(3)
    values = [rng.uniform(0.01, 1.0) for _ in range(60)]
    p = sign_flip_p(values)
    sd = math.sqrt(sum(v * v for v in values))
    assert p == pytest.approx(0.5 * math.erfc(sum(values) / sd / math.sqrt(2)))


def test_a_settled_task_has_no_disagreeing_sample() -> None:
    assert task_settled([0.0, 0.0], [0.0])
    assert not task_settled([0.0, 0.0], [1.0])
    assert not task_settled([0.0, 1.0], [0.0])
    assert not task_settled([], [])


def test_nothing_moved_is_untested_not_a_tie() -> None:
    test = paired_test({"a": [0.0], "b": [1.0]}, {"a": [0.0], "b": [1.0]})
    assert test.untested and not test.passed and not test.harmful
    decision = decide_paired(
        {"a": [0.0], "b": [1.0]}, {"a": [0.0], "b": [1.0]}, config=GateConfig(), task_ids=["a", "b"]
    )
    assert decision.action is GateAction.UNTESTED and not decision.accepted
    assert any("untested" in r for r in decision.arithmetic["reasons"])


def test_one_improved_pair_is_not_enough_but_four_are() -> None:
    one = paired_test({"a": [0.0]}, {"a": [1.0]}, confidence=0.9)
    assert one.p_improve == pytest.approx(0.5) and not one.passed and not one.untested
    four = paired_test({"a": [0.0] * 4}, {"a": [1.0] * 4}, confidence=0.9)
    assert four.p_improve == pytest.approx(1 / 16) and four.passed
    assert not paired_test({"a": [0.0] * 4}, {"a": [1.0] * 4}, confidence=0.95).passed


def test_a_significantly_regressed_task_blocks_an_otherwise_winning_candidate() -> None:
    base = {"up1": [0.0] * 4, "up2": [0.0] * 4, "up3": [0.0] * 4, "down": [1.0] * 4}
    cand = {"up1": [1.0] * 4, "up2": [1.0] * 4, "up3": [1.0] * 4, "down": [0.0] * 4}
    test = paired_test(base, cand, confidence=0.9)
    assert test.p_improve < 0.1 and test.mean_delta > 0
    assert test.regressed == ("down",) and test.harmful and not test.passed
    decision = decide_paired(base, cand, config=GateConfig(), task_ids=list(base))
    assert decision.action is GateAction.REJECT and decision.blocked_by_regression


def test_a_crashed_candidate_sample_counts_zero_and_a_missing_baseline_is_left_out() -> None:
    test = paired_test({"a": [1.0], "b": [math.nan]}, {"a": [math.nan], "b": [1.0]})
    assert [t.task_id for t in test.tasks] == ["a"] and test.unpaired == ("b",)
    assert test.tasks[0].deltas == (-1.0,)


def test_min_delta_is_part_of_the_tested_hypothesis() -> None:
    base = {t: [0.0] * 4 for t in "abcd"}
    cand = {"a": [1.0] * 4, "b": [0.0] * 4, "c": [0.0] * 4, "d": [0.0] * 4}
    assert paired_test(base, cand, min_delta=0.0).passed
    assert not paired_test(base, cand, min_delta=0.3).passed  # mean delta 0.25


def test_a_leaked_validation_task_turns_an_accept_into_reject_unverified() -> None:
    base = {t: [0.0] * 4 for t in "ab"}
    cand = {t: [1.0] * 4 for t in "ab"}
    clean = decide_paired(base, cand, config=GateConfig(), task_ids=["a", "b"], seen=["c"])
    assert clean.action is GateAction.ACCEPT_NEW_BEST and not clean.leaked
    leaked = decide_paired(base, cand, config=GateConfig(), task_ids=["a", "b"], seen=["b"])
    assert leaked.action is GateAction.REJECT_UNVERIFIED and leaked.leaked
    assert leaked.arithmetic["leaks"] == ["b"]


def test_the_decision_records_its_numbers() -> None:
    base = {t: [0.0] * 4 for t in "ab"}
    cand = {t: [1.0] * 4 for t in "ab"}
    arithmetic = decide_paired(base, cand, config=GateConfig(), task_ids=["a", "b"]).arithmetic
    for key in ("method", "confidence", "alpha", "p_improve", "p_regress", "mean_delta",
                "n_pairs", "validated_on", "per_task", "rule"):  # fmt: skip
        assert key in arithmetic, key
    assert arithmetic["n_pairs"] == 8 and arithmetic["p_improve"] == pytest.approx(1 / 256)


def _noisy_arm(
    rng: random.Random, truth: dict[str, float], samples: int, flip: float
) -> dict[str, list[float]]:
    return {
        t: [v if rng.random() >= flip else 1.0 - v for _ in range(samples)]
        for t, v in truth.items()
    }


def test_noise_alone_passes_at_most_about_alpha_of_the_time() -> None:
    """A candidate that changes nothing, 20% of answers flipped: false accepts stay near
    alpha (the test is one-sided, so about half the two-sided rate is expected)."""
    rng = random.Random(11)
    truth = {f"t{i}": float(i % 3 == 0) for i in range(8)}
    passes = 0
    runs = 400
    for _ in range(runs):
        base = _noisy_arm(rng, truth, 4, 0.2)
        cand = _noisy_arm(rng, truth, 4, 0.2)
        passes += paired_test(base, cand, confidence=0.9).passed
    assert passes / runs <= 0.12


def test_a_real_effect_under_noise_is_found_with_enough_samples() -> None:
    rng = random.Random(5)
    base_truth = {f"t{i}": 0.0 for i in range(6)}
    cand_truth = {f"t{i}": 1.0 if i < 3 else 0.0 for i in range(6)}
    found = sum(
        paired_test(_noisy_arm(rng, base_truth, 4, 0.2), _noisy_arm(rng, cand_truth, 4, 0.2)).passed
        for _ in range(100)
    )
    assert found >= 60  # measured: 75 of 100 (power at 4 samples, 3 of 6 tasks moved)


def test_no_regression_blocks_any_lower_task_even_when_not_significant() -> None:
    base = {"a": [0.0] * 4, "b": [0.0] * 4, "c": [1.0]}
    cand = {"a": [1.0] * 4, "b": [1.0] * 4, "c": [0.0]}
    assert decide_paired(base, cand, config=GateConfig(), task_ids=list(base)).accepted
    strict = decide_paired(base, cand, config=GateConfig(no_regression=True), task_ids=list(base))
    assert not strict.accepted and strict.blocked_by_regression
