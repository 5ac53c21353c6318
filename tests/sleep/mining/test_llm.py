"""LLM miner over a real BackendPool talking HTTP to the fake model server on 127.0.0.1."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from skillopt.backends.base import Completion, CompletionRequest
from skillopt.errors import BudgetExceededError, ReplyFormatError
from skillopt.replies import parse_reply
from skillopt.types import ReferenceKind, RuleCheck, TaskOutcome
from skillopt_sleep.harvest import SELF_MARKER, SessionDigest, SourceKind
from skillopt_sleep.mining.llm import MAX_TASKS_PER_SESSION, MineReply, llm_mine
from support.fake_model_server import FakeModelServer, Reply, Request
from support.pools import one_member_pool

T = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)
SECRET = "ghp_" + "S3cr3t" * 7


def _digest(sid: str, *intents: str) -> SessionDigest:
    return SessionDigest(
        source=SourceKind.CODEX,
        session_id=sid,
        path=Path(f"/t/{sid}.jsonl"),
        cwd=Path("/work/proj"),
        started_at=T,
        ended_at=T,
        user_intents=intents,
        assistant_finals=(f"final answer mentioning {SECRET}",),
        tools_used=("shell",),
        n_user_turns=len(intents),
    )


GOOD = {
    "tasks": [
        {
            "intent": "Write the weekly release notes from the changelog",
            "rubric": "Groups changes by area; mentions breaking changes first",
            "checks": [{"op": "max_chars", "arg": 900}],
            "satisfied": True,
        },
        {
            "intent": "Summarise a pull request in under 300 characters",
            "checks": [
                {"op": "max_chars", "arg": 300},
                {"op": "explode", "arg": "x"},
                {"op": "regex", "arg": "("},
            ],
            "satisfied": False,
        },
        {"intent": "Something with no way to judge it", "rubric": "", "checks": []},
        {"intent": "A fourth task that must be cut off", "rubric": "anything"},
    ]
}
RETRIED = {"tasks": [{"intent": "Rename the config loader module", "rubric": "Updates imports"}]}


def _reply(request: Request) -> str:
    text = request.user_text
    if "SESSION-GOOD" in text:
        return "Sure! Here you go:\n```json\n" + json.dumps(GOOD) + "\n```"
    if "SESSION-RETRY" in text:
        if "could not be used" in text:
            return json.dumps(RETRIED)
        return '{"tasks": [{"intent": 42}]}'
    if "SESSION-EMPTY" in text:
        return "[]"
    return "I cannot produce JSON today."


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(reply_fn=_reply) as srv:
        yield srv


async def test_llm_mining_end_to_end(server: FakeModelServer) -> None:
    digests = [
        _digest("good", "SESSION-GOOD release notes please", "no, breaking changes first"),
        _digest("retry", f"SESSION-RETRY rename the loader, token {SECRET}"),
        _digest("bad", "SESSION-BAD migrate the database schema"),
    ]
    async with one_member_pool(server) as pool:
        result = await llm_mine(pool, digests, project="/work/proj")

    assert result.miner == "llm"
    by_intent = {t.intent: t for t in result.tasks}
    notes = by_intent["Write the weekly release notes from the changelog"]
    assert notes.reference_kind is ReferenceKind.RUBRIC and notes.checks == ()  # rubric wins
    assert notes.outcome is TaskOutcome.SUCCESS
    assert re.fullmatch(r"llm_[0-9a-f]{12}", notes.id)
    assert "mined:llm" in notes.tags
    pr = by_intent["Summarise a pull request in under 300 characters"]
    assert pr.reference_kind is ReferenceKind.RULE
    assert pr.checks == (RuleCheck(op="max_chars", arg=300),)  # bad checks dropped
    assert pr.outcome is TaskOutcome.FAIL
    assert "Something with no way to judge it" not in by_intent  # neither rubric nor checks
    assert "A fourth task that must be cut off" not in by_intent  # at most 3 per session
    assert "Rename the config loader module" in by_intent  # second attempt succeeded
    heuristic = [t for t in result.tasks if t.id.startswith("h_")]
    assert [t.source_sessions for t in heuristic] == [("bad",)]

    diag = result.diagnostics
    assert diag["calls"] == 5  # good 1 + retry 2 + bad 2
    assert [f["session_id"] for f in diag["fallbacks"]] == ["bad"]
    assert "bad reply" in diag["fallbacks"][0]["cause"]
    assert diag["dropped_uncheckable"] == 1 and diag["dropped_checks"] == 2
    assert diag["truncated_per_session"] == len(GOOD["tasks"]) - MAX_TASKS_PER_SESSION

    bodies = [r.raw_body.decode() for r in server.requests]
    assert len(bodies) == 5
    assert all(json.dumps(SELF_MARKER)[1:-1] in b for b in bodies)
    assert all(r.user_text.startswith(SELF_MARKER) for r in server.requests)
    assert not any(SECRET in b for b in bodies)
    assert SECRET not in json.dumps(diag)


async def test_no_usable_llm_task_falls_back_to_heuristic(server: FakeModelServer) -> None:
    digests = [
        _digest("e1", "SESSION-EMPTY document the API"),
        _digest("e2", "SESSION-EMPTY x y z"),
    ]
    async with one_member_pool(server) as pool:
        result = await llm_mine(pool, digests)
    assert result.miner == "heuristic"
    assert {t.source_sessions for t in result.tasks} == {("e1",), ("e2",)}
    assert "fallback_all" in result.diagnostics
    assert result.diagnostics["calls"] == 2  # an empty list is valid: no retry


async def test_failed_calls_fall_back_with_the_cause(server: FakeModelServer) -> None:
    server.script("opt", Reply(status=400), Reply(status=400))
    digests = [_digest("a", "SESSION-GOOD one"), _digest("b", "SESSION-GOOD two")]
    async with one_member_pool(server) as pool:
        result = await llm_mine(pool, digests, max_tasks=10)
    causes = [f["cause"] for f in result.diagnostics["fallbacks"]]
    assert len(causes) == 2 and all(c.startswith("call failed") for c in causes)
    assert result.miner == "heuristic"


async def test_max_sessions_and_max_tasks(server: FakeModelServer) -> None:
    digests = [_digest(f"g{i}", f"SESSION-GOOD number {i}") for i in range(4)]
    async with one_member_pool(server) as pool:
        result = await llm_mine(pool, digests, max_sessions=2, max_tasks=1)
    assert len(server.requests) == 2
    assert len(result.tasks) == 1
    assert result.tasks[0].source_sessions == ("g0", "g1")  # merged repeat ranks first


class _CappedPool:
    """A completer at the seam that hits the night's spend cap."""

    async def complete(self, request: CompletionRequest) -> Completion:
        raise BudgetExceededError("night call cap reached")


async def test_budget_exhaustion_propagates() -> None:
    with pytest.raises(BudgetExceededError):
        await llm_mine(_CappedPool(), [_digest("a", "Do the release notes")])


@pytest.mark.parametrize(
    ("text", "n_tasks"),
    [
        ('{"tasks": []}', 0),
        ('prose first {"tasks": [{"intent": "abc def ghi", "rubric": "r"}]} prose after', 1),
        ('```json\n{"tasks": [{"intent": "abc def ghi"}]}\n```', 1),
        ('[{"intent": "abc def ghi", "checks": [{"op": "no_refusal"}]}]', 1),
    ],
)
def test_parse_reply_accepts(text: str, n_tasks: int) -> None:
    assert len(parse_reply(text, MineReply).tasks) == n_tasks


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("no json here", "no JSON"),
        ('{"tasks": [}', "invalid JSON"),
        ('{"tasks": [{"intent": 3}]}', "tasks.0.intent"),
        ('{"tasks": [], "extra": 1}', "extra"),
        ('{"tasks": [{"intent": "a", "satisfied": "yes"}]}', "satisfied"),
        ('{"tasks": [{"intent": "a", "checks": [{"op": "x", "arg": [1]}]}]}', "arg"),
    ],
)
def test_parse_reply_rejects(text: str, problem: str) -> None:
    with pytest.raises(ReplyFormatError, match=problem) as info:
        parse_reply(text, MineReply)
    assert info.value.raw == text


def _echo(request: Request) -> str:
    """The model copies the request it was shown (redacted before it left) as the task."""
    asked = re.search(r"ECHO ([^\n\"\\]+)", request.user_text)
    assert asked is not None
    return json.dumps({"tasks": [{"intent": asked.group(1).strip(), "rubric": "Covers it"}]})


async def test_a_secret_appended_to_a_request_does_not_make_a_second_task() -> None:
    ask = "ECHO Summarise the changelog for the release"
    digests = [_digest("with", f"{ask} token={SECRET}"), _digest("without", ask)]
    with FakeModelServer(reply_fn=_echo) as server:
        async with one_member_pool(server) as pool:
            result = await llm_mine(pool, digests, project="/work/proj")
        shown = [r.user_text for r in server.requests]
    assert any("[REDACTED:" in text for text in shown) and not any(SECRET in t for t in shown)
    (task,) = result.tasks
    assert task.source_sessions == ("with", "without")
    assert task.intent == "Summarise the changelog for the release"  # not the marker's copy
