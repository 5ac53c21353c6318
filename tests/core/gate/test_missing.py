"""A terminal decision with a sample that never came: it stands when no value the sample
could have had moves it, and is ``untested`` when one could."""

from __future__ import annotations

import math

from skillopt.gate import GateConfig, decide_paired
from skillopt.gate.missing import bounds
from skillopt.types import GateAction

NAN = math.nan
CONFIG = GateConfig(confirm_samples=0)
GAINS = [f"g{i}" for i in range(11)]


def _decide(base: dict[str, list[float]], cand: dict[str, list[float]], *, terminal: bool):
    return decide_paired(base, cand, config=CONFIG, task_ids=list(base), terminal=terminal)


def test_a_clear_gain_stands_whatever_the_lost_sample_scored() -> None:
    base = {t: [0.0] for t in [*GAINS, "lost"]}
    cand = {t: [1.0] for t in GAINS} | {"lost": [NAN]}
    decision = _decide(base, cand, terminal=True)
    assert decision.action is GateAction.ACCEPT_NEW_BEST and decision.accepted
    assert decision.arithmetic["missing_samples"] == {"lost": 1}
    assert any("whatever they would have scored" in r for r in decision.arithmetic["reasons"])
    # a decision a later check reads task by task keeps the plain rule
    assert _decide(base, cand, terminal=False).action is GateAction.UNTESTED


def test_a_gain_the_lost_sample_could_cancel_is_untested() -> None:
    tasks = ["g0", "g1", "g2", "g3"]
    base = {t: [0.0] for t in tasks} | {"lost": [1.0]}
    cand = {t: [1.0] for t in tasks} | {"lost": [NAN]}
    # four gains pass (p = 1/16), and pass beside a fifth pair at 0 (the lost sample at 1);
    # beside one at -1 (the lost sample at 0) they do not (p = 6/32)
    decision = _decide(base, cand, terminal=True)
    assert decision.action is GateAction.UNTESTED and not decision.accepted


def test_a_clear_harm_is_rejected_whatever_the_lost_baseline_sample_scored() -> None:
    base = {t: [1.0] for t in GAINS} | {"lost": [NAN]}
    cand = {t: [0.0] for t in [*GAINS, "lost"]}
    decision = _decide(base, cand, terminal=True)
    assert decision.action is GateAction.REJECT and not decision.accepted


def test_with_nothing_else_changed_a_lost_sample_leaves_it_untested() -> None:
    """Filled with the other arm's score, nothing would have moved: neither reject nor
    accept can stand."""
    base = {t: [1.0] for t in [*GAINS, "lost"]}
    cand = {t: [1.0] for t in GAINS} | {"lost": [NAN]}
    assert _decide(base, cand, terminal=True).action is GateAction.UNTESTED


def test_a_score_outside_the_unit_range_has_no_bound() -> None:
    base = {t: [0.0] for t in [*GAINS, "lost"]}
    cand = {t: [3.0] for t in GAINS} | {"lost": [NAN]}
    assert _decide(base, cand, terminal=True).action is GateAction.UNTESTED


def test_a_sample_absent_from_one_arm_is_bounded_like_a_failed_one() -> None:
    base = {t: [0.0] for t in GAINS} | {"lost": [0.0, 0.0]}
    cand = {t: [1.0] for t in GAINS} | {"lost": [0.0]}
    decision = _decide(base, cand, terminal=True)
    assert decision.accepted and decision.arithmetic["missing_samples"] == {"lost": 1}


def test_each_bound_judges_regressions_at_the_count_that_is_hardest_on_it() -> None:
    """The worst bound corrects a regression over the fewest tasks any fill leaves lower
    (here one: at best the lost task is not lower); the best bound over the most (two)."""
    base = {t: [0.0] for t in GAINS} | {"r": [1.0] * 4, "m": [0.5]}
    cand = {t: [1.0] for t in GAINS} | {"r": [0.0] * 4, "m": [NAN]}
    found = bounds(base, cand, task_ids=list(base), confidence=0.9, min_delta=0.0)
    assert found is not None
    assert found.worst.regressed == ("r",)  # p 1/16 <= 0.1 / 1
    assert found.best.regressed == ()  # p 1/16 > 0.1 / 2
    assert _decide(base, cand, terminal=True).action is GateAction.UNTESTED
