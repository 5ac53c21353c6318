"""Replies with a shape are asked for with their JSON schema, where the endpoint takes it.

A pool over the fake OpenAI server on 127.0.0.1: the judge's verdict goes out with its
schema (``response_format`` ``json_schema``, strict), derived from the model that parses
the verdict; an endpoint that refuses ``json_schema`` (a 400 naming ``response_format``) is
asked again with ``json_object`` at once, and every later request of the process goes out
in the format it took; one that refuses both gets the prompt alone. A member's
``structured_outputs`` setting fixes the format instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from skillopt.backends.base import CompletionRequest, Role
from skillopt.backends.http.structured import forget_learned_formats
from skillopt.backends.pool import BackendPool
from skillopt.config import PoolConfig
from skillopt.replies import reply_schema
from skillopt.trainer.replies import AnalystReply, ask_json
from skillopt.types import EditTarget
from skillopt_sleep.mining.joint import JointReply
from skillopt_sleep.reflect import EditsReply, parse_edits
from skillopt_sleep.verdicts import JudgeReply, parse_judge_reply
from support.fake_model_server import FakeModelServer, Reply, Request

VERDICT = json.dumps({"score": 1.0, "reason": "meets the rubric"})


@pytest.fixture(autouse=True)
def _fresh_memory() -> Iterator[None]:
    forget_learned_formats()
    yield
    forget_learned_formats()


def _pool(server: FakeModelServer, **member: Any) -> BackendPool:
    cfg = PoolConfig.model_validate(
        {
            "members": [
                {"kind": "openai", "name": "m", "base_url": server.url("m"), "model": "small"}
                | member
            ],
            "roles": {"target": ["m"], "optimizer": ["m"]},
            "retry": {"max_attempts": 3, "base_delay": 0.0, "max_delay": 0.0},
            "cache": {"enabled": False},
        }
    )
    return BackendPool.from_config(cfg)


def _judge_request() -> CompletionRequest:
    return CompletionRequest(
        role=Role.OPTIMIZER,
        prompt="Judge the answer. Reply with one JSON object.",
        stage="judge",
        json_mode=True,
        reply_schema=reply_schema(JudgeReply, "verdict"),
        check_reply=parse_judge_reply,
    )


def _refusing(*formats: str) -> Any:
    """A server rule: 400 naming ``response_format`` for the formats it does not take."""

    def rule(request: Request) -> Reply:
        asked = (request.body.get("response_format") or {}).get("type")
        if asked in formats:
            message = f"response_format type {asked!r} is not supported by this server"
            return Reply(status=400, body={"error": {"message": message, "type": "invalid"}})
        return Reply(text=VERDICT)

    return rule


def _formats(server: FakeModelServer) -> list[str | None]:
    return [(r.body.get("response_format") or {}).get("type") for r in server.requests_for("m")]


async def test_a_verdict_is_asked_with_its_schema_and_parsed() -> None:
    with FakeModelServer(rule=lambda _: Reply(text=VERDICT)) as server:
        async with _pool(server) as pool:
            done = await pool.complete(_judge_request())
        (seen,) = server.requests_for("m")
    assert seen.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "verdict",
            "schema": {
                "type": "object",
                "properties": {"score": {"type": "number", "minimum": 0.0, "maximum": 1.0},
                               "reason": {"type": "string", "maxLength": 200}},
                "required": ["score", "reason"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }  # fmt: skip
    assert parse_judge_reply(done.text).hard == 1.0


async def test_a_server_refusing_json_schema_falls_back_once_and_remembers() -> None:
    with FakeModelServer(rule=_refusing("json_schema")) as server:
        async with _pool(server) as pool:
            for _ in range(3):
                done = await pool.complete(_judge_request())
                assert parse_judge_reply(done.text).hard == 1.0
            totals = pool.accounting()["total"]
        # one refusal, then json_object for that call and every later one
        assert _formats(server) == ["json_schema", "json_object", "json_object", "json_object"]
        # a new pool of the same process asks the endpoint in the format it took
        async with _pool(server) as pool:
            await pool.complete(_judge_request())
        assert _formats(server)[-1] == "json_object"
    assert totals["attempts"] == 4 and totals["calls"] == 3
    assert totals["failures"] == {"format_unsupported": 1}


def _refusing_bounds(request: Request) -> Reply:
    """A strict hosted API's rule: a schema bounding a string's length is refused."""
    schema = ((request.body.get("response_format") or {}).get("json_schema") or {}).get("schema")
    if "maxLength" in json.dumps(schema):
        message = "Invalid schema for response_format 'verdict': 'maxLength' is not permitted."
        return Reply(status=400, body={"error": {"message": message, "type": "invalid"}})
    return Reply(text=VERDICT)


def _bounded(server: FakeModelServer) -> list[bool]:
    return [
        "maxLength" in json.dumps(r.body.get("response_format") or {})
        for r in server.requests_for("m")
    ]


async def test_a_verdicts_reason_is_bounded_where_the_endpoint_takes_it() -> None:
    """A grammar-constrained server ends the reason at the length the parser keeps (a small
    judge's run-on reason had carried the reply past its token cap, score and all); an
    endpoint that refuses the bound is asked with the schema alone, from then on."""
    with FakeModelServer(rule=_refusing_bounds) as server:
        async with _pool(server) as pool:
            for _ in range(2):
                done = await pool.complete(_judge_request())
                assert parse_judge_reply(done.text).hard == 1.0
        assert _formats(server) == ["json_schema"] * 3
        assert _bounded(server) == [True, False, False]
    with FakeModelServer(rule=lambda _: Reply(text=VERDICT)) as server:
        async with _pool(server) as pool:
            await pool.complete(_judge_request())
        assert _bounded(server) == [True]


def test_a_bound_is_asked_for_not_enforced_by_the_parser() -> None:
    """The parser reads a reason longer than the bound (an endpoint that ignores it) and
    keeps its first characters, as it always did."""
    verdict = parse_judge_reply(json.dumps({"score": 0.5, "reason": "x" * 1000}))
    assert verdict.soft == 0.5 and len(verdict.reason) == 200


async def test_a_server_refusing_both_formats_gets_the_prompt_alone() -> None:
    with FakeModelServer(rule=_refusing("json_schema", "json_object")) as server:
        async with _pool(server) as pool:
            first = await pool.complete(_judge_request())
            await pool.complete(_judge_request())
        assert _formats(server) == ["json_schema", "json_object", None, None]
    assert parse_judge_reply(first.text).hard == 1.0


async def test_the_setting_fixes_the_format_per_endpoint() -> None:
    with FakeModelServer(rule=lambda _: Reply(text=VERDICT)) as server:
        async with _pool(server, structured_outputs="json_object") as pool:
            await pool.complete(_judge_request())
        async with _pool(server, structured_outputs="prompt") as pool:
            await pool.complete(_judge_request())
        assert _formats(server) == ["json_object", None]


async def test_a_fixed_format_the_server_refuses_is_not_downgraded() -> None:
    with FakeModelServer(rule=_refusing("json_schema")) as server:
        async with _pool(server, structured_outputs="json_schema") as pool:
            with pytest.raises(Exception, match="request rejected"):
                await pool.complete(_judge_request())
        assert _formats(server) == ["json_schema"]


async def test_the_analyst_asks_with_the_schema_of_its_reply() -> None:
    patch = {"patch": {"reasoning": "r", "edits": [{"op": "append", "content": "Cite it."}]}}
    with FakeModelServer(rule=lambda _: Reply(text=json.dumps(patch))) as server:
        async with _pool(server) as pool:
            reply = await ask_json(
                pool, prompt="p", schema=AnalystReply, stage="reflect", timeout_s=5,
                max_output_tokens=200,
            )  # fmt: skip
        (seen,) = server.requests_for("m")
    sent = seen.body["response_format"]["json_schema"]
    # first the bounded form (its strings and lists end where a grammar stops them)
    assert sent["schema"] == reply_schema(AnalystReply).bounded and sent["strict"] is True
    assert reply.value.patch.edits[0].content == "Cite it."


def test_each_shape_is_derived_from_the_model_that_reads_it() -> None:
    """Strict: every object closed, every property required (nested ones included), and
    what the schema asks for is what the parser accepts."""

    def objects(node: Any) -> Iterator[dict[str, Any]]:
        if isinstance(node, dict):
            if "properties" in node:
                yield node
            for value in node.values():
                yield from objects(value)
        elif isinstance(node, list):
            for value in node:
                yield from objects(value)

    for model in (JudgeReply, EditsReply, JointReply, AnalystReply):
        schema = reply_schema(model).schema
        assert schema["type"] == "object"  # structured outputs want a root object
        for node in objects(schema):
            assert node["additionalProperties"] is False
            assert node["required"] == list(node["properties"])
            assert all("default" not in prop for prop in node["properties"].values())
    asked = {"edits": [{"op": "add", "content": "Run the tests.", "anchor": "", "rationale": ""}]}
    (edit,) = parse_edits(json.dumps(asked), target=EditTarget.SKILL, budget=3)
    assert edit.content == "Run the tests."
