"""The gate: metric arithmetic, its one config, per-task scores, greedy, the trainer's rule,
leave-one-out attribution."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from skillopt.errors import ConfigError
from skillopt.gate import (
    GateConfig,
    GateMetric,
    bonferroni,
    decide_greedy,
    decide_trainer,
    gate_score,
    leave_one_out,
    task_scores,
)
from skillopt.types import GateAction, GateDecision, RolloutResult


@pytest.mark.parametrize(
    ("hard", "soft", "metric", "w", "expected"),
    [
        (1.0, 0.2, "hard", 0.5, 1.0),
        (1.0, 0.2, "soft", 0.5, 0.2),
        (1.0, 0.2, "mixed", 0.5, 0.6),
        (1.0, 0.0, "mixed", 0.25, 0.75),
        (1.0, 0.0, "mixed", 1.5, 0.0),  # w clamped to 1
        (1.0, 0.0, "mixed", -2.0, 1.0),  # w clamped to 0
        (0.0, 1.0, GateMetric.MIXED, 0.0, 0.0),
    ],
)
def test_gate_score(hard: float, soft: float, metric: str, w: float, expected: float) -> None:
    assert math.isclose(gate_score(hard, soft, metric=metric, mixed_weight=w), expected)


def test_unknown_metric_raises() -> None:
    with pytest.raises(ConfigError):
        gate_score(1.0, 1.0, metric="bogus")
    with pytest.raises(ValidationError):
        GateConfig(metric="bogus")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_delta": -0.1},
        {"min_delta": math.nan},
        {"samples_per_task": 0},
        {"samples_per_task": 4, "max_samples_per_task": 2},
        {"confirm_samples": -1},
        {"confidence": 1.0},
        {"mixed_weight": math.inf},
        {"mode": "loose"},
        {"samples": 2},  # not a key: a misspelling is an error, not a default
    ],
)
def test_gate_config_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        GateConfig(**kwargs)


def test_one_set_of_defaults() -> None:
    """The night's and the trainer's gate are one model with one set of defaults: a lone
    regression is confirmed on 16 fresh pairs wherever the gate runs."""
    from skillopt.trainer.config import TrainerConfig
    from skillopt_sleep.config import SleepConfig

    night, trainer = SleepConfig().gate, TrainerConfig().gate
    assert type(night) is type(trainer) is GateConfig
    assert night == GateConfig()
    assert night == trainer  # the trainer's own choices live in configs/trainer/base.toml
    assert night.confirm_samples == trainer.confirm_samples == 16
    with pytest.raises(ValidationError):
        night.confidence = 0.5  # type: ignore[misc]


def test_task_scores_average_samples_and_skip_errors() -> None:
    cfg = GateConfig(metric=GateMetric.MIXED, mixed_weight=0.5, samples_per_task=3)
    results = [
        RolloutResult(task_id="a", sample_id=0, hard=1.0, soft=1.0),
        RolloutResult(task_id="a", sample_id=1, hard=0.0, soft=0.0),
        RolloutResult(task_id="a", sample_id=2, hard=1.0, soft=1.0, error="timeout"),
        RolloutResult(task_id="b", sample_id=0, hard=0.0, soft=1.0),
        RolloutResult(task_id="c", sample_id=0, error="boom"),
    ]
    scores = task_scores(results, config=cfg)
    assert scores["a"] == 0.5
    assert scores["b"] == 0.5
    assert math.isnan(scores["c"])


def test_greedy() -> None:
    applied = decide_greedy(2)
    assert (applied.action, applied.accepted, applied.baseline, applied.candidate) == (
        GateAction.GREEDY_APPLIED,
        True,
        0.0,
        0.0,
    )
    noop = decide_greedy(0)
    assert (noop.action, noop.accepted) == (GateAction.GREEDY_NOOP, False)


@pytest.mark.parametrize(
    ("current", "best", "candidate", "use_gate", "action", "new_best"),
    [
        (0.5, 0.5, 0.6, True, GateAction.ACCEPT_NEW_BEST, True),
        (0.5, 0.5, 0.5, True, GateAction.REJECT, False),
        (0.4, 0.6, 0.5, True, GateAction.ACCEPT, False),
        (0.4, 0.6, 0.6, True, GateAction.ACCEPT, False),
        (0.5, 0.6, 0.4, True, GateAction.REJECT, False),
        (0.5, 0.6, 0.4, False, GateAction.FORCE_ACCEPT, False),
        (0.5, 0.6, 0.7, False, GateAction.FORCE_ACCEPT, True),
        (0.5, 0.5, math.nan, True, GateAction.REJECT, False),
    ],
)
def test_decide_trainer(
    current: float,
    best: float,
    candidate: float,
    use_gate: bool,
    action: GateAction,
    new_best: bool,
) -> None:
    d = decide_trainer(current, best, candidate, use_gate=use_gate)
    assert d.action is action
    assert d.accepted is (action is not GateAction.REJECT)
    assert d.arithmetic["new_best"] is new_best


def test_decide_trainer_margin() -> None:
    assert decide_trainer(0.5, 0.5, 0.55, min_delta=0.1).action is GateAction.REJECT
    assert decide_trainer(0.5, 0.5, 0.65, min_delta=0.1).action is GateAction.ACCEPT_NEW_BEST
    with pytest.raises(ConfigError):
        decide_trainer(0.5, 0.5, 0.6, min_delta=-1)


_score = st.one_of(
    st.floats(min_value=0, max_value=1, allow_nan=False), st.sampled_from([0.0, 0.5, 1.0])
)


@given(
    current=_score,
    best=_score,
    candidate=_score,
)
def test_trainer_never_accepts_a_tie_or_worse(
    current: float, best: float, candidate: float
) -> None:
    d = decide_trainer(current, best, candidate)
    if d.accepted:
        assert candidate > current
    if d.action is GateAction.ACCEPT_NEW_BEST:
        assert candidate > best


def _decision(accepted: bool) -> GateDecision:
    action = GateAction.ACCEPT_NEW_BEST if accepted else GateAction.REJECT
    return GateDecision(action=action, accepted=accepted, baseline=0.0, candidate=0.0, delta=0.0)


def test_bonferroni() -> None:
    assert bonferroni(0.9, 1) == 0.9
    assert math.isclose(bonferroni(0.9, 4), 0.975)
    assert bonferroni(0.9, 0) == 0.9


async def test_leave_one_out_drops_the_spoiler_at_the_corrected_confidence() -> None:
    """Each edit is left out once; the one whose removal is significantly better is
    dropped, every comparison runs at the Bonferroni-corrected confidence, and a bundle that
    cannot be built is not tested."""
    seen: list[tuple[str, str, float]] = []

    async def build(rest: Sequence[str]) -> str | None:
        text = "".join(rest)
        return None if text == "ab" else text

    async def compare(
        whole: str, without: str, config: GateConfig, left_out: tuple[int, ...]
    ) -> GateDecision:
        seen.append((whole, without, config.confidence))
        return _decision("s" not in without)

    found = await leave_one_out(
        "abs", ["a", "b", "s"], build=build, compare=compare, config=GateConfig()
    )
    assert found.dropped == ()  # the bundle without "s" could not be built
    found = await leave_one_out(
        "xabs", ["x", "a", "b", "s"], build=build, compare=compare, config=GateConfig()
    )
    assert found.dropped == (3,)
    assert found.kept == ["x", "a", "b"]
    assert {c for _, _, c in seen} == {bonferroni(0.9, 3), bonferroni(0.9, 4)}
    assert found.decisions[0] is not None and not found.decisions[0].accepted
