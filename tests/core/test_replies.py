"""The one parser of JSON in model replies: finding it, validating it, one retry."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, TypeAdapter, model_validator

from skillopt.backends.base import Completion, CompletionRequest, Role, Usage
from skillopt.errors import ReplyFormatError
from skillopt.replies import (
    MAX_FAILED_STARTS,
    ask_validated,
    extract_json_object,
    json_values,
    parse_reply,
)


class Verdict(BaseModel):
    score: float
    reason: str = ""


class Tasks(BaseModel):
    tasks: list[str]

    @model_validator(mode="before")
    @classmethod
    def _bare(cls, data: Any) -> Any:
        return {"tasks": data} if isinstance(data, list) else data


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ('{"a": 1}', [{"a": 1}]),
        ('Sure!\n```json\n{"a": 1}\n```\nDone.', [{"a": 1}]),
        ("```\n[1, 2]\n```", [[1, 2]]),
        ('prose {"a": {"b": [1]}} more prose', [{"a": {"b": [1]}}]),
        ("x [oops [1, 2] tail", [[1, 2]]),
        ('{"a": 1} and then [2]', [{"a": 1}, [2]]),
        ("see {this} and [that]", []),
        ("no json at all", []),
    ],
)
def test_json_values_finds_top_level_values(text: str, values: list[Any]) -> None:
    assert json_values(text) == values


def test_fenced_block_comes_first_and_is_not_repeated() -> None:
    text = 'I tried [1] first.\n```json\n{"score": 0.5}\n```'
    assert json_values(text) == [{"score": 0.5}, [1]]
    assert parse_reply(text, Verdict).score == 0.5


def test_first_validating_value_wins() -> None:
    assert parse_reply('{"x": 1} then {"score": 1, "reason": "ok"}', Verdict).reason == "ok"


def test_the_schema_states_the_shapes_it_accepts() -> None:
    assert parse_reply('["a", "b"]', Tasks).tasks == ["a", "b"]
    assert parse_reply('{"tasks": ["a"]}', Tasks).tasks == ["a"]
    assert parse_reply("[1, 2]", TypeAdapter(list[int])) == [1, 2]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("no json here", "no JSON in the reply"),
        ('{"score": [}', "invalid JSON"),
        ('{"reason": "x"}', "score: Field required"),
        # the problem of the fenced block (what the model meant), not of a stray value
        ('[1] ```json\n{"score": "high"}\n```', "score: Input should be a valid number"),
        # else the problem of the longest value
        ('{"score": "x"} {"reason": "a long explanation"}', "score: Field required"),
    ],
)
def test_unusable_reply_names_the_real_cause(text: str, problem: str) -> None:
    with pytest.raises(ReplyFormatError) as info:
        parse_reply(text, Verdict)
    assert problem in str(info.value)
    assert info.value.raw == text


def test_extract_json_object_skips_arrays() -> None:
    assert extract_json_object('[1] {"a": 2}') == {"a": 2}
    with pytest.raises(ReplyFormatError, match="no JSON object"):
        extract_json_object("[1, 2]")


def test_brackets_that_are_not_json_stop_the_scan() -> None:
    text = "[" * (MAX_FAILED_STARTS + 5) + ' {"score": 1}'
    assert json_values(text) == []  # gave up before reaching the object


@pytest.mark.parametrize(
    ("text", "score", "reason"),
    [
        # the reason ran on until the token cap cut it: the score it finished stands
        ('{"score": 0.5, "reason": "The answer names the cause, and then it goes on', 0.5, ""),
        ('{"score": 1, "reason": "ok", "extra": {"deep": [1, 2', 1.0, "ok"),
    ],
)
def test_a_reply_cut_short_keeps_the_members_it_finished(
    text: str, score: float, reason: str
) -> None:
    verdict = parse_reply(text, Verdict)
    assert (verdict.score, verdict.reason) == (score, reason)


def test_a_list_cut_short_keeps_its_whole_elements() -> None:
    assert parse_reply('["a", "b", "c is cut', Tasks).tasks == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        # nothing finished before the cut: no member is guessed at
        ('{"reason": "cut before the score, it', "invalid JSON"),
        ('{"score": 0.', "invalid JSON"),
        # what it finished lacks the score
        ('{"reason": "short", "score', "score: Field required"),
    ],
)
def test_a_reply_cut_before_its_fields_is_still_unusable(text: str, problem: str) -> None:
    with pytest.raises(ReplyFormatError, match=problem):
        parse_reply(text, Verdict)


class Scripted:
    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.requests: list[CompletionRequest] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        text = self.replies.pop(0)
        return Completion(text=text, usage=Usage(), member="m", latency=0.0)


def _request() -> CompletionRequest:
    return CompletionRequest(role=Role.OPTIMIZER, prompt="judge this", stage="judge")


async def test_one_retry_quotes_the_problem() -> None:
    model = Scripted('{"reason": "x"}', '{"score": 0.25}')
    reply = await ask_validated(model.complete, _request(), lambda t: parse_reply(t, Verdict))
    assert reply.value.score == 0.25 and reply.attempts == 2
    retry = model.requests[1]
    assert retry.sample_id == 1
    assert [m.role for m in retry.messages] == ["user", "assistant", "user"]
    assert "score: Field required" in retry.messages[-1].content


async def test_two_misses_report_both_problems() -> None:
    model = Scripted('{"reason": "x"}', "I cannot answer that")
    with pytest.raises(ReplyFormatError) as info:
        await ask_validated(model.complete, _request(), lambda t: parse_reply(t, Verdict))
    message = str(info.value)
    assert message.startswith("score: Field required")  # the first, real cause
    assert "on retry: no JSON in the reply" in message
    assert info.value.problems == ("score: Field required", "no JSON in the reply")
    assert info.value.raw == "I cannot answer that"
