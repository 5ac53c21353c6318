"""The gate: metric arithmetic, strict improvement, margin, regressions, leaks, greedy, trainer."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skillopt.errors import ConfigError
from skillopt.gate import (
    GateConfig,
    GateMetric,
    decide,
    decide_greedy,
    decide_trainer,
    gate_score,
    is_gate_off,
    task_deltas,
    task_scores,
)
from skillopt.types import DeltaStatus, GateAction, GateDecision, RolloutResult

TRAIN = ["t1", "t2"]
VAL = ["v1", "v2"]
CFG = GateConfig(metric=GateMetric.HARD)


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
    with pytest.raises(ConfigError):
        GateConfig(metric="bogus")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_delta": -0.1},
        {"min_delta": math.nan},
        {"samples_per_task": 0},
        {"mixed_weight": math.inf},
    ],
)
def test_gate_config_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        GateConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mode", "off"),
    [
        ("off", True),
        ("None", True),
        ("FALSE", True),
        (" greedy ", True),
        ("on", False),
        ("strict", False),
    ],
)
def test_is_gate_off(mode: str, off: bool) -> None:
    assert is_gate_off(mode) is off


# (name, baseline, candidate, config, train, val, edits_applied, action, blocked, leaked)
DECIDE_CASES = [
    ("improves", {"v1": 0.0, "v2": 1.0}, {"v1": 1.0, "v2": 1.0}, CFG, TRAIN, VAL, True,
     GateAction.ACCEPT_NEW_BEST, False, False),
    ("tie_rejects", {"v1": 0.5, "v2": 0.5}, {"v1": 0.5, "v2": 0.5}, CFG, TRAIN, VAL, True,
     GateAction.REJECT, False, False),
    ("worse_rejects", {"v1": 1.0, "v2": 1.0}, {"v1": 0.0, "v2": 1.0}, CFG, TRAIN, VAL, True,
     GateAction.REJECT, False, False),
    ("below_margin", {"v1": 0.0, "v2": 0.0}, {"v1": 0.2, "v2": 0.0},
     GateConfig(metric=GateMetric.HARD, min_delta=0.1), TRAIN, VAL, True,
     GateAction.REJECT, False, False),
    ("at_margin_rejects", {"v1": 0.0, "v2": 0.0}, {"v1": 0.5, "v2": 0.0},
     GateConfig(metric=GateMetric.HARD, min_delta=0.25), TRAIN, VAL, True,
     GateAction.REJECT, False, False),
    ("above_margin", {"v1": 0.0, "v2": 0.0}, {"v1": 1.0, "v2": 0.0},
     GateConfig(metric=GateMetric.HARD, min_delta=0.25), TRAIN, VAL, True,
     GateAction.ACCEPT_NEW_BEST, False, False),
    ("regression_allowed", {"v1": 0.0, "v2": 1.0}, {"v1": 1.0, "v2": 0.5}, CFG, TRAIN, VAL, True,
     GateAction.ACCEPT_NEW_BEST, False, False),
    ("regression_blocks", {"v1": 0.0, "v2": 1.0}, {"v1": 1.0, "v2": 0.5},
     GateConfig(metric=GateMetric.HARD, no_regression=True), TRAIN, VAL, True,
     GateAction.REJECT, True, False),
    ("missing_candidate_blocks", {"v1": 0.0, "v2": 0.0, "v3": 0.0}, {"v1": 1.0, "v2": 1.0},
     GateConfig(metric=GateMetric.HARD, no_regression=True), TRAIN, [*VAL, "v3"], True,
     GateAction.REJECT, True, False),
    ("nan_candidate_blocks", {"v1": 0.0, "v2": 0.0}, {"v1": 1.0, "v2": math.nan},
     GateConfig(metric=GateMetric.HARD, no_regression=True), TRAIN, VAL, True,
     GateAction.REJECT, True, False),
    ("empty_train_leak", {"v1": 0.0, "v2": 0.0}, {"v1": 1.0, "v2": 1.0}, CFG, [], VAL, True,
     GateAction.REJECT_UNVERIFIED, False, True),
    ("overlap_leak", {"v1": 0.0, "v2": 0.0}, {"v1": 1.0, "v2": 1.0}, CFG, ["t1", "v1"], VAL, True,
     GateAction.REJECT_UNVERIFIED, False, True),
    ("leak_but_reject_stays_reject", {"v1": 1.0, "v2": 1.0}, {"v1": 1.0, "v2": 1.0}, CFG, [], VAL,
     True, GateAction.REJECT, False, True),
    ("empty_val", {}, {}, CFG, TRAIN, [], True, GateAction.REJECT, False, True),
    ("no_edits", {"v1": 0.0, "v2": 0.0}, {"v1": 1.0, "v2": 1.0}, CFG, TRAIN, VAL, False,
     GateAction.REJECT, False, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("baseline", "candidate", "config", "train", "val", "applied", "action", "blocked", "leaked"),
    [case[1:] for case in DECIDE_CASES],
    ids=[case[0] for case in DECIDE_CASES],
)
def test_decide_branches(
    baseline: dict[str, float],
    candidate: dict[str, float],
    config: GateConfig,
    train: list[str],
    val: list[str],
    applied: bool,
    action: GateAction,
    blocked: bool,
    leaked: bool,
) -> None:
    decision = decide(
        baseline, candidate, config=config, train_ids=train, val_ids=val, edits_applied=applied
    )
    assert decision.action is action
    assert decision.accepted is (action is GateAction.ACCEPT_NEW_BEST)
    assert decision.blocked_by_regression is blocked
    assert decision.leaked is leaked
    arithmetic = decision.arithmetic
    assert arithmetic["baseline_mean"] == decision.baseline
    assert arithmetic["candidate_mean"] == decision.candidate
    assert math.isclose(decision.delta, decision.candidate - decision.baseline)
    if not decision.accepted:
        assert arithmetic["reasons"]
    # The decision survives a JSON round trip with its arithmetic.
    assert GateDecision.from_dict(decision.to_dict()).action is action


def test_missing_candidate_counts_zero_and_missing_baseline_is_excluded() -> None:
    d = decide(
        {"v1": 0.5, "v2": 0.5},
        {"v1": 1.0},
        config=CFG,
        train_ids=TRAIN,
        val_ids=VAL,
    )
    assert d.candidate == 0.5  # (1.0 + 0) / 2
    assert d.action is GateAction.REJECT
    d2 = decide({"v1": 0.5}, {"v1": 1.0, "v2": 1.0}, config=CFG, train_ids=TRAIN, val_ids=VAL)
    assert d2.arithmetic["n_compared"] == 1
    assert (d2.baseline, d2.candidate) == (0.5, 1.0)
    assert [t.status for t in d2.task_deltas] == [DeltaStatus.IMPROVED, DeltaStatus.REGRESSED]


def test_leak_check_can_be_turned_off_for_trials() -> None:
    base, cand = {"v1": 0.0, "v2": 0.0}, {"v1": 1.0, "v2": 1.0}
    final = decide(base, cand, config=CFG, train_ids=[], val_ids=VAL)
    assert final.action is GateAction.REJECT_UNVERIFIED
    trial = decide(base, cand, config=CFG, train_ids=[], val_ids=VAL, check_leaks=False)
    assert trial.action is GateAction.ACCEPT_NEW_BEST
    assert not trial.leaked
    assert trial.arithmetic["leak_check"] is False


def test_task_deltas_statuses() -> None:
    deltas = task_deltas(
        {"a": 0.5, "b": 0.5, "c": 0.5, "d": math.inf},
        {"a": 1.0, "b": 0.0, "c": 0.5, "d": 1.0},
        ["a", "b", "c", "d", "e", "a"],
    )
    assert [(t.task_id, t.status, t.finite) for t in deltas] == [
        ("a", DeltaStatus.IMPROVED, True),
        ("b", DeltaStatus.REGRESSED, True),
        ("c", DeltaStatus.UNCHANGED, True),
        ("d", DeltaStatus.REGRESSED, False),
        ("e", DeltaStatus.REGRESSED, False),
    ]


def test_none_score_raises() -> None:
    with pytest.raises(TypeError):
        task_deltas({"a": None}, {"a": 1.0}, ["a"])  # type: ignore[dict-item]


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
_ids = [f"v{i}" for i in range(5)]


@given(
    base=st.lists(_score, min_size=5, max_size=5),
    cand=st.lists(_score, min_size=5, max_size=5),
    margin=st.sampled_from([0.0, 0.0, 0.05, 0.2]),
    no_regression=st.booleans(),
)
def test_never_accepts_without_strict_improvement(
    base: list[float], cand: list[float], margin: float, no_regression: bool
) -> None:
    cfg = GateConfig(metric=GateMetric.HARD, min_delta=margin, no_regression=no_regression)
    d = decide(
        dict(zip(_ids, base, strict=True)),
        dict(zip(_ids, cand, strict=True)),
        config=cfg,
        train_ids=TRAIN,
        val_ids=_ids,
    )
    strictly_better = sum(cand) / 5 > sum(base) / 5 + margin
    if d.accepted:
        assert d.candidate > d.baseline + margin
        assert strictly_better or math.isclose(sum(cand) / 5, sum(base) / 5 + margin)
        if no_regression:
            assert all(c >= b for b, c in zip(base, cand, strict=True))
    # Identical documents never pass.
    same = decide(
        dict(zip(_ids, base, strict=True)),
        dict(zip(_ids, base, strict=True)),
        config=cfg,
        train_ids=TRAIN,
        val_ids=_ids,
    )
    assert not same.accepted


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


@given(
    scores=st.lists(
        st.sampled_from([0.0, 0.1, 0.25, 0.3, 1 / 3, 0.5, 2 / 3, 0.7, 0.75, 5 / 6, 1.0]),
        min_size=2,
        max_size=8,
    ),
    data=st.data(),
)
def test_a_shuffle_of_the_same_scores_is_a_tie(scores: list[float], data: st.DataObject) -> None:
    """Rounding noise of summation order never turns a tie into an accept."""
    shuffled = data.draw(st.permutations(scores))
    ids = [f"v{i}" for i in range(len(scores))]
    d = decide(
        dict(zip(ids, scores, strict=True)),
        dict(zip(ids, shuffled, strict=True)),
        config=CFG,
        train_ids=TRAIN,
        val_ids=ids,
    )
    assert d.candidate == d.baseline
    assert not d.accepted


def test_order_noise_example() -> None:
    # Plain left-to-right sums made this shuffle "better" by 1.1e-16.
    base = [1.0, 0.7, 2 / 3, 5 / 6, 0.1, 2 / 3, 1 / 3, 5 / 6]
    cand = [2 / 3, 0.7, 5 / 6, 5 / 6, 1 / 3, 2 / 3, 1.0, 0.1]
    ids = [f"v{i}" for i in range(len(base))]
    d = decide(
        dict(zip(ids, base, strict=True)),
        dict(zip(ids, cand, strict=True)),
        config=CFG,
        train_ids=TRAIN,
        val_ids=ids,
    )
    assert d.action is GateAction.REJECT
