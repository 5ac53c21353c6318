"""Which changes make a measurement another question: the models, their request settings,
the judge and the scoring do; how calls are made (concurrency, timeouts, keys) does not."""

from __future__ import annotations

from typing import Any

import pytest

from skillopt.types import TaskRecord
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.night.quiet.questions import answer_key, task_hash

_OPENAI = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "small"}


def _config(
    target: dict[str, Any] | None = None, judge_model: str = "big", **gate: Any
) -> SleepConfig:
    members = [
        {**_OPENAI, "name": "t", **(target or {})},
        {**_OPENAI, "name": "j", "model": judge_model},
    ]
    return SleepConfig.model_validate(
        {"pool": {"members": members, "roles": {"target": ["t"], "optimizer": ["j"]}},
         "gate": gate}
    )  # fmt: skip


BASE = answer_key(_config())


@pytest.mark.parametrize(
    "changed",
    [
        _config({"model": "other"}),
        _config({"request": {"temperature": 0.7}}),
        _config({"request": {"target": {"reasoning_effort": "high"}}}),
        _config({"base_url": "http://127.0.0.1:10/v1"}),
        _config(judge_model="another-judge"),
        _config(metric="hard"),
    ],
)
def test_what_changes_an_answer_or_its_verdict_is_another_question(changed: SleepConfig) -> None:
    assert answer_key(changed) != BASE


def test_how_calls_are_made_is_the_same_question() -> None:
    same = _config({"max_concurrency": 2, "timeout": 30.0, "api_key_env": "OTHER_KEY",
                    "requests_per_minute": 60})  # fmt: skip
    assert answer_key(same) == BASE
    assert answer_key(SleepConfig.model_validate({})) == ""  # no pool: nothing is reused


def test_a_task_is_the_same_question_whatever_its_provenance() -> None:
    task = TaskRecord(id="t1", intent="Where is the retry delay computed?")
    moved = TaskRecord(id="t1", intent=task.intent, source_sessions=("s9",), project="p")
    assert task_hash(moved) == task_hash(task)
    assert task_hash(TaskRecord(id="t1", intent="Where is the retry limit set?")) != task_hash(task)
    assert task_hash(TaskRecord(id="t1", intent=task.intent, reference="a rubric")) != task_hash(
        task
    )
