"""Reply validation with one retry, and the hierarchical merge (call counts, fallback, order)."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

import anyio
import pytest

from skillopt.errors import ReplyFormatError
from skillopt.replies import extract_json_object
from skillopt.trainer.merge import hierarchical_merge, merge_sides
from skillopt.trainer.replies import (
    AnalystReply,
    EditItem,
    RankReply,
    SourceType,
    ask_json,
)
from support.trainer_fakes import ScriptedBackend, pool_of


def test_extract_json_object_variants() -> None:
    assert extract_json_object('```json\n{"a": 1}\n```') == {"a": 1}
    assert extract_json_object('Sure! {"a": {"b": 2}} done') == {"a": {"b": 2}}
    with pytest.raises(ReplyFormatError):
        extract_json_object("[1, 2]")
    with pytest.raises(ReplyFormatError):
        extract_json_object("no json")


async def test_invalid_reply_is_retried_once_with_the_problem_quoted() -> None:
    replies = iter(['{"reasoning": "x"}', '{"reasoning": "x", "selected_indices": [2, 0]}'])
    backend = ScriptedBackend(reply=lambda _r: next(replies))
    async with pool_of(backend) as pool:
        got = await ask_json(
            pool,
            prompt="rank these",
            schema=RankReply,
            stage="rank",
            timeout_s=5,
            max_output_tokens=100,
        )
    assert got.value.selected_indices == [2, 0]
    assert got.attempts == 2
    retry = backend.requests[1]
    assert "selected_indices" in retry.as_messages()[-1].content  # the problem is named
    assert retry.as_messages()[1].role == "assistant"


async def test_two_invalid_replies_raise_with_the_raw_text() -> None:
    backend = ScriptedBackend(reply=lambda _r: '{"patch": {"edits": [{"op": "explode"}]}}')
    async with pool_of(backend) as pool:
        with pytest.raises(ReplyFormatError) as info:
            await ask_json(
                pool,
                prompt="p",
                schema=AnalystReply,
                stage="analyst",
                timeout_s=5,
                max_output_tokens=100,
            )
    assert "explode" in info.value.raw
    assert len(backend.requests) == 2


def _edits(tag: str, n: int = 1) -> list[EditItem]:
    return [EditItem(op="append", content=f"{tag}-{k}") for k in range(n)]


async def test_hierarchical_merge_call_count_and_fallback() -> None:
    calls: list[tuple[int, int]] = []
    pauses = random.Random(11)

    async def merge(
        group: Sequence[Sequence[EditItem]], level: int, side: SourceType | None
    ) -> list[EditItem] | None:
        calls.append((level, len(group)))
        await anyio.sleep(pauses.random() / 200)  # completion order varies call to call
        return None  # every call "fails": the fallback concatenates in order

    patches = [_edits(f"p{i}") for i in range(5)]
    out = await hierarchical_merge(patches, side=SourceType.FAILURE, group_size=2, merge=merge)
    assert sorted(calls) == [(1, 2), (1, 2), (2, 2), (3, 2)]  # 5 -> 3 -> 2 -> 1
    assert out.calls == 4 and out.fallbacks == 4
    assert [e.content for e in out.edits] == [f"p{i}-0" for i in range(5)]
    assert [e.merge_level for e in out.edits] == [1, 1, 1, 1, 3]


async def test_merge_result_is_independent_of_completion_order() -> None:
    pauses = random.Random(12)

    async def merge(
        group: Sequence[Sequence[EditItem]], level: int, side: SourceType | None
    ) -> list[EditItem] | None:
        await anyio.sleep(pauses.random() / 100)
        joined = "+".join(e.content for p in group for e in p)
        return [EditItem(op="append", content=joined)]

    patches = [_edits(f"p{i}") for i in range(7)]
    outs = set()
    for _ in range(3):
        got = await merge_sides(patches, [_edits("s", 2)], group_size=3, merge=merge)
        outs.add(json.dumps([e.content for e in got.edits]))
    assert len(outs) == 1
    assert outs.pop() == json.dumps(["p0-0+p1-0+p2-0+p3-0+p4-0+p5-0+p6-0+s-0+s-1"])


async def test_merge_sides_pass_through_when_one_side_is_empty() -> None:
    async def never(*_a: object) -> list[EditItem] | None:
        raise AssertionError("no call expected")

    got = await merge_sides([_edits("f", 2)], [], group_size=2, merge=never)
    assert [e.content for e in got.edits] == ["f-0", "f-1"] and got.calls == 0
