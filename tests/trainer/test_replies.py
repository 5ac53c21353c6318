"""The optimizer reply schemas accept the shapes a model gives the same content in."""

from __future__ import annotations

import json
from typing import Any

import pytest

from skillopt.errors import ReplyFormatError
from skillopt.replies import parse_reply, reply_schema
from skillopt.trainer.replies import (
    AnalystFullReply,
    AnalystReply,
    EditItem,
    MergeReply,
    RankReply,
    analyst_shape,
    ask_json,
    fit_summaries,
)
from skillopt.trainer.scorers.rubric import REASONING_CHARS, JudgeReply, parse_judge_reply
from support.trainer_fakes import ScriptedBackend, pool_of

EDITS = [{"op": "append", "content": "Give the bare number."}]


@pytest.mark.parametrize(
    "shape",
    [
        {"patch": {"reasoning": "r", "edits": EDITS}},
        {"reasoning": "r", "edits": EDITS},  # the patch's fields at the top level
        {"patch": EDITS},
        EDITS,
    ],
)
def test_analyst_reply_shapes(shape: Any) -> None:
    reply = parse_reply(json.dumps(shape), AnalystReply)
    assert [e.content for e in reply.patch.edits] == ["Give the bare number."]


def test_analyst_reply_keeps_the_other_top_level_fields() -> None:
    text = json.dumps({"batch_size": 3, "patterns": [{"label": "x"}], "edits": EDITS})
    reply = parse_reply(text, AnalystReply)
    assert reply.batch_size == 3 and reply.patterns[0].label == "x"


def test_full_rewrite_analyst_reply_without_the_patch_wrapper() -> None:
    text = json.dumps({"skill_candidates": [{"new_skill": "# Skill\n- rule"}]})
    assert parse_reply(text, AnalystFullReply).patch.skill_candidates[0].new_skill


def test_bare_lists_for_single_list_replies() -> None:
    assert parse_reply(json.dumps(EDITS), MergeReply).edits[0].op == "append"
    assert parse_reply("[2, 0]", RankReply).selected_indices == [2, 0]


async def test_unusable_analyst_replies_report_the_first_problem() -> None:
    replies = iter(['{"patch": {"edits": "none"}}', "I would rather not."])
    backend = ScriptedBackend(reply=lambda _r: next(replies))
    async with pool_of(backend) as pool:
        with pytest.raises(ReplyFormatError) as info:
            await ask_json(
                pool,
                prompt="analyse",
                schema=AnalystReply,
                stage="analyst",
                timeout_s=5,
                max_output_tokens=100,
            )
    assert str(info.value).startswith("patch.edits: Input should be a valid list")


def test_summaries_are_whole_and_the_total_is_bounded() -> None:
    long = "x" * 300
    edits = [EditItem(op="append", content=c) for c in ("short rule", long, "another")]
    assert edits[1].summary() == f"append: {long}"  # never cut
    assert fit_summaries(edits, 10_000) == [e.summary() for e in edits]
    fitted = fit_summaries(edits, 100)
    assert fitted == ["append: short rule", "(2 more left out to stay within 100 characters)"]


def test_the_shapes_bound_what_a_small_model_runs_on_in() -> None:
    """Issue 31: the bounded schemas (sent first, to a grammar that enforces them) end the
    judge's reasoning and the analyst's strings and lists where a small model would run on
    until its token cap cut the reply; the schema without bounds carries none of them."""
    judge = reply_schema(JudgeReply, "verdict")
    assert judge.bounded is not None
    assert judge.bounded["properties"]["reasoning"]["maxLength"] == REASONING_CHARS
    shape = analyst_shape(3)
    assert shape.bounded is not None
    assert list(shape.bounded["properties"])[:2] == ["batch_size", "patch"]  # the patch first
    assert shape.bounded["$defs"]["AnalystPatch"]["properties"]["edits"]["maxItems"] == 3
    assert shape.bounded["$defs"]["EditItem"]["properties"]["op"]["enum"][0] == "append"
    unbounded = json.dumps(shape.schema)
    assert "maxItems" not in unbounded and "maxLength" not in unbounded
    long = parse_judge_reply(json.dumps({"score": 1, "reasoning": "x" * 500}))
    assert len(long.reasoning) == REASONING_CHARS  # read, and cut
