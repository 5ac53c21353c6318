"""Record types: JSON round-trip, enum values, strict validation, legacy task shape."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skillopt.errors import DataError
from skillopt.gate import decide_trainer
from skillopt.types import (
    DeltaStatus,
    EditRecord,
    EditTarget,
    GateAction,
    GateDecision,
    JudgeResult,
    Origin,
    ReferenceKind,
    RolloutResult,
    RuleCheck,
    Split,
    TaskDelta,
    TaskOutcome,
    TaskRecord,
)

TASK = TaskRecord(
    id="t1",
    intent="summarise the diff",
    context="git diff ...",
    reference="short summary",
    reference_kind=ReferenceKind.RULE,
    checks=(RuleCheck(op="max_chars", arg=400), RuleCheck(op="contains", arg="summary")),
    tags=("tools:git",),
    split=Split.VAL,
    origin=Origin.DREAM,
    derived_from="t0",
    system_contract="be brief",
    skill_hint="git-helper",
    project="p",
    outcome=TaskOutcome.FAIL,
    source_sessions=("s1", "s2"),
)

RECORDS: list[Any] = [
    TASK,
    RuleCheck(op="regex", arg=r"^\d+$"),
    RolloutResult(
        task_id="t1",
        sample_id=2,
        response="ok",
        hard=1.0,
        soft=0.5,
        reason="failed: max_chars=3",
        failed_criteria=("max_chars=3",),
        tools_called=("search",),
        member="m1",
        latency=0.25,
        error="",
        skill_hash="ab",
        memory_hash="cd",
        tokens=12,
    ),
    EditRecord(target=EditTarget.MEMORY, op="replace", content="x", anchor="y", rationale="z"),
    JudgeResult(hard=0.0, soft=0.5, reason="r", failed=("contains=x",)),
    GateDecision(
        action=GateAction.ACCEPT_NEW_BEST,
        accepted=True,
        baseline=0.25,
        candidate=0.75,
        delta=0.5,
        task_deltas=(
            TaskDelta(task_id="a", baseline=0.0, candidate=1.0, status=DeltaStatus.IMPROVED),
        ),
        arithmetic={"metric": "mixed", "w": 0.5},
    ),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_round_trip_through_json_text(record: Any) -> None:
    data = record.to_dict()
    text = json.dumps(data, allow_nan=False)
    assert type(record).from_dict(json.loads(text)) == record


def test_enums_serialise_as_plain_strings() -> None:
    data = TASK.to_dict()
    assert data["split"] == "val"
    assert data["origin"] == "dream"
    assert data["reference_kind"] == "rule"
    assert data["outcome"] == "fail"
    assert data["checks"] == [{"op": "max_chars", "arg": 400}, {"op": "contains", "arg": "summary"}]
    assert data["tags"] == ["tools:git"]


def test_records_are_frozen_and_keyword_only() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        TASK.id = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        RuleCheck("max_chars", 3)  # type: ignore[misc]


def test_non_finite_scores_become_null() -> None:
    delta = TaskDelta(
        task_id="a", baseline=1.0, candidate=math.nan, status=DeltaStatus.REGRESSED, finite=False
    )
    data = delta.to_dict()
    assert data["candidate"] is None
    json.dumps(data, allow_nan=False)
    assert TaskDelta.from_dict(data).candidate is None


@pytest.mark.parametrize(
    ("cls", "data"),
    [
        (TaskRecord, {"id": "x", "intent": "y", "bogus": 1}),
        (TaskRecord, {"intent": "y"}),
        (TaskRecord, {"id": "x", "intent": "y", "split": "nowhere"}),
        (TaskRecord, {"id": "x", "intent": "y", "origin": "alien"}),
        (TaskRecord, {"id": "x", "intent": "y", "judge": "rule"}),
        (TaskRecord, {"id": 3, "intent": "y"}),
        (TaskRecord, {"id": "", "intent": "y"}),
        (RolloutResult, {"task_id": ""}),
        (RuleCheck, {"op": "max_chars", "arg": True}),
        (RuleCheck, {"op": "max_chars", "arg": 1.5}),
        (RuleCheck, {"op": 1, "arg": "x"}),
        (EditRecord, {"target": "weights"}),
        (JudgeResult, {"hard": 1.0}),
        (GateDecision, {"action": "maybe", "accepted": True, "baseline": 0, "candidate": 0}),
    ],
)
def test_invalid_input_raises_data_error(cls: Any, data: dict[str, Any]) -> None:
    with pytest.raises(DataError):
        cls.from_dict(data)


def test_non_mapping_raises_data_error() -> None:
    with pytest.raises(DataError):
        TaskRecord.from_dict(["not", "a", "dict"])  # type: ignore[arg-type]


def test_legacy_task_shape_is_read() -> None:
    legacy = {
        "id": "old",
        "project": "p",
        "intent": "do it",
        "context_excerpt": "ctx",
        "system": "contract",
        "attempted_solution": "tried",
        "outcome": "success",
        "reference_kind": "none",
        "judge": {"kind": "rule", "checks": [{"op": "contains", "arg": "x"}]},
        "split": "holdout",
        "origin": "real",
    }
    task = TaskRecord.from_dict(legacy)
    assert task.context == "ctx"
    assert task.system_contract == "contract"
    assert task.split is Split.VAL
    assert task.origin is Origin.MINED
    assert task.reference_kind is ReferenceKind.RUBRIC
    assert task.checks == (RuleCheck(op="contains", arg="x"),)
    assert TaskRecord.from_dict({"id": "r", "intent": "i", "split": "replay"}).split is Split.TRAIN


def test_legacy_judge_sets_rule_kind_when_absent() -> None:
    task = TaskRecord.from_dict(
        {"id": "a", "intent": "b", "judge": {"checks": [{"op": "min_chars", "arg": 3}]}}
    )
    assert task.reference_kind is ReferenceKind.RULE


def test_rule_check_label() -> None:
    assert RuleCheck(op="max_chars", arg=40).label() == "max_chars=40"


@given(
    id_=st.text(min_size=1, max_size=20),
    intent=st.text(max_size=50),
    tags=st.lists(st.text(max_size=10), max_size=4),
    split=st.sampled_from(list(Split)),
    origin=st.sampled_from(list(Origin)),
    arg=st.one_of(st.text(max_size=10), st.integers(min_value=0, max_value=10**6)),
)
def test_task_round_trip_property(
    id_: str, intent: str, tags: list[str], split: Split, origin: Origin, arg: str | int
) -> None:
    task = TaskRecord(
        id=id_,
        intent=intent,
        tags=tuple(tags),
        split=split,
        origin=origin,
        checks=(RuleCheck(op="contains", arg=arg),),
    )
    assert TaskRecord.from_dict(json.loads(json.dumps(task.to_dict()))) == task


def test_records_with_non_finite_numbers_survive_their_round_trip() -> None:
    decision = decide_trainer(math.nan, 0.5, 0.7)  # a stale, non-finite current score
    back = GateDecision.from_dict(json.loads(json.dumps(decision.to_dict(), allow_nan=False)))
    assert math.isnan(back.baseline) and math.isnan(back.delta) and back.candidate == 0.7
    rollout = RolloutResult(task_id="t", hard=math.inf, soft=math.nan)
    again = RolloutResult.from_dict(rollout.to_dict())
    assert math.isnan(again.hard) and math.isnan(again.soft)
    assert math.isnan(JudgeResult.from_dict({"hard": None, "soft": 0.5}).hard)


def test_one_rollout_record_serves_night_and_trainer() -> None:
    from skillopt.trainer.envs.base import rollout_from_json, rollout_to_json

    night = RolloutResult(task_id="t1", response="done", hard=1.0, soft=1.0, reason="ok")
    assert "trajectory" not in night.to_dict() and "extras" not in night.to_dict()
    assert RolloutResult.from_dict(night.to_dict()) == night
    trainer = RolloutResult(
        task_id="q7",
        hard=0.0,
        soft=0.5,
        task_type="count",
        reason="EM=0: predicted 'about 3'",
        response="about 3",
        trajectory="Question: how many?",
        extras={"attempts": 2},
    )
    assert not trainer.passed and night.passed
    assert RolloutResult.from_dict(trainer.to_dict()) == trainer
    stored = rollout_to_json(trainer)  # the trainer's run-directory shape, unchanged
    assert stored["id"] == "q7" and stored["prediction"] == "about 3"
    assert stored["fail_reason"].startswith("EM=0")
    assert rollout_from_json(stored) == trainer
