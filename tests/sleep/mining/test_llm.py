"""What the LLM miner makes of the model's answers, through the night's gathering stage:
real transcripts, a real archive, a real pool on a loopback HTTP server answering the
shared mining prompt entry by entry."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from skillopt.backends.base import Completer
from skillopt.backends.wrappers import BudgetCompleter
from skillopt.errors import BudgetExceededError
from skillopt.types import ReferenceKind, RuleCheck, TaskOutcome
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.harvest import SELF_MARKER
from skillopt_sleep.mining.joint import read_reply
from skillopt_sleep.mining.llm import MAX_TASKS_PER_SESSION
from skillopt_sleep.night.gather_tasks import Gathered, gather_night
from skillopt_sleep.tasks.archive import open_archive
from support.fake_model_server import FakeModelServer, Reply, Request
from support.mining_replies import answer
from support.pools import one_member_pool
from support.transcripts import Turn, write_claude_session

NOW = datetime(2026, 11, 25, 2, 30, tzinfo=UTC)
SECRET = "ghp_" + "S3cr3t" * 7

GOOD = [
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
RETRIED = [{"intent": "Rename the config loader module", "rubric": "Updates imports"}]


def _reply(request: Request) -> str:
    """A model that answers some entries, garbles one until asked again, and one always."""
    text = request.user_text
    reasked = "could not be used" in text

    def per_entry(entry: str) -> Any:
        if "SESSION-GOOD" in entry:
            return GOOD
        if "SESSION-RETRY" in entry:
            return RETRIED if reasked else [{"intent": 42}]
        if "SESSION-EMPTY" in entry:
            return []
        return "I cannot produce JSON today."

    return "Sure! Here you go:\n```json\n" + answer(text, per_entry) + "\n```"


class World:
    """A project with Claude Code sessions, and the night's gathering stage over them."""

    def __init__(self, root: Path) -> None:
        self.claude, self.project = root / "claude", root / "proj"
        self.project.mkdir()
        self.db = root / "state" / "tasks.sqlite"
        self.written = 0

    def session(self, sid: str, *turns: Turn) -> None:
        """A session, older than the ones written before it."""
        self.written += 1
        start = NOW - timedelta(hours=self.written)
        write_claude_session(
            self.claude, cwd=self.project, turns=turns, start=start, session_id=sid
        )

    def config(self, **night: Any) -> SleepConfig:
        sources = {"kinds": ["claude_code"], "claude_home": str(self.claude), "lookback_hours": 0}
        return SleepConfig.model_validate({"sources": sources, "night": night})

    async def gather(self, pool: Completer, **night: Any) -> Gathered:
        with open_archive(self.db, now=NOW) as archive:
            return await gather_night(
                self.config(**night), project=self.project, archive=archive, pool=pool,
                use_llm=True, now=NOW,
            )  # fmt: skip


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(reply_fn=_reply) as srv:
        yield srv


async def test_answers_become_judgeable_tasks(server: FakeModelServer, world: World) -> None:
    world.session(
        "good",
        Turn(user="SESSION-GOOD release notes please", answer=f"final answer mentioning {SECRET}"),
        Turn(user="no, breaking changes first"),
    )
    world.session("retry", Turn(user=f"SESSION-RETRY rename the loader, token {SECRET}"))
    world.session("bad", Turn(user="SESSION-BAD migrate the database schema"))
    async with one_member_pool(server) as pool:
        got = await world.gather(pool)

    mine = got.diagnostics["mine"]
    assert mine["miner"] == "llm"
    by_intent = {t.intent: t for t in got.mined}
    notes = by_intent["Write the weekly release notes from the changelog"]
    # the rubric judges; the checks stay beside it as necessary conditions, checked first
    assert notes.reference_kind is ReferenceKind.RUBRIC
    assert notes.checks == (RuleCheck(op="max_chars", arg=900),)
    assert notes.outcome is TaskOutcome.SUCCESS
    assert re.fullmatch(r"llm_[0-9a-f]{12}", notes.id)
    assert "mined:llm" in notes.tags and notes.source_sessions == ("good",)
    pr = by_intent["Summarise a pull request in under 300 characters"]
    assert pr.reference_kind is ReferenceKind.RULE  # the developer's constraint, a rule check
    assert pr.checks == (RuleCheck(op="max_chars", arg=300),)  # the invalid checks dropped
    assert pr.outcome is TaskOutcome.FAIL
    assert "Something with no way to judge it" not in by_intent  # neither rubric nor checks
    assert "A fourth task that must be cut off" not in by_intent  # at most 3 per session
    assert by_intent["Rename the config loader module"].source_sessions == ("retry",)  # re-ask
    heuristic = [t for t in got.mined if t.id.startswith("h_")]
    assert [t.source_sessions for t in heuristic] == [("bad",)]

    assert (mine["calls"], mine["reasked"]) == (2, 2)  # the garbled two, asked again together
    assert [f["session_id"] for f in mine["fallbacks"]] == ["bad"]
    assert "bad reply" in mine["fallbacks"][0]["cause"]
    assert (mine["dropped_uncheckable"], mine["dropped_checks"]) == (1, 2)
    assert mine["dropped_extra"] == len(GOOD) - MAX_TASKS_PER_SESSION

    assert len(server.requests) == 2
    assert all(r.user_text.startswith(SELF_MARKER) for r in server.requests)  # never harvested
    assert not any(SECRET in r.raw_body.decode() for r in server.requests)  # redacted first
    assert SECRET not in json.dumps(got.diagnostics)


def _fail_the_call(server: FakeModelServer) -> None:
    server.script("opt", Reply(status=400))


@pytest.mark.parametrize(
    ("how", "calls", "cause"),
    [(lambda server: None, 1, ""), (_fail_the_call, 0, "call failed")],
    ids=["every answer empty", "the call failed"],
)
async def test_no_usable_answer_makes_it_a_heuristic_night(
    server: FakeModelServer,
    world: World,
    how: Callable[[FakeModelServer], None],
    calls: int,
    cause: str,
) -> None:
    world.session("e1", Turn(user="SESSION-EMPTY document the public API"))
    world.session("e2", Turn(user="SESSION-EMPTY describe the build steps"))
    how(server)
    async with one_member_pool(server) as pool:
        got = await world.gather(pool)
    mine = got.diagnostics["mine"]
    assert mine["miner"] == "heuristic" and "fallback_all" in mine
    assert {t.source_sessions for t in got.mined} == {("e1",), ("e2",)}
    assert len(server.requests) == 1  # an empty list is a valid answer: nothing asked again
    assert (mine["calls"], mine["reasked"]) == (calls, 0)
    causes = [f["cause"] for f in mine["fallbacks"]]
    assert len(causes) == (2 if cause else 0) and all(c.startswith(cause) for c in causes)


async def test_the_spend_cap_stops_mining(server: FakeModelServer, world: World) -> None:
    world.session("a", Turn(user="SESSION-GOOD release notes please"))
    world.session("b", Turn(user="SESSION-EMPTY document the public API"))
    async with one_member_pool(server) as pool:
        capped = BudgetCompleter(pool, max_calls=1)
        with pytest.raises(BudgetExceededError):  # not a reason to fall back: the night stops
            await world.gather(capped, mine_call_tokens=500)  # a call for each session
    assert capped.reached == "calls" and len(server.requests) <= 1


def _echo(request: Request) -> str:
    """The model copies the request it was shown (redacted before it left) as the task."""

    def per_entry(entry: str) -> list[dict[str, str]]:
        asked = re.search(r"ECHO ([^\n]+)", entry)
        assert asked is not None
        return [{"intent": asked.group(1).strip(), "rubric": "Covers it"}]

    return answer(request.user_text, per_entry)


@pytest.mark.parametrize("newest", ["with", "without"])
async def test_a_secret_appended_to_a_request_does_not_make_a_second_task(
    world: World, newest: str
) -> None:
    ask = "ECHO Summarise the changelog for the release"
    openings = {"with": f"{ask} token={SECRET}", "without": ask}
    for sid in (newest, *(s for s in openings if s != newest)):
        world.session(sid, Turn(user=openings[sid]))
    with FakeModelServer(reply_fn=_echo) as server:
        async with one_member_pool(server) as pool:
            got = await world.gather(pool)
        shown = [r.user_text for r in server.requests]
    assert len(shown) == 1 and SECRET not in shown[0]  # one entry for both sessions
    assert "[REDACTED:" not in shown[0]  # the request shown in the wording without the secret
    (task,) = got.mined
    assert sorted(task.source_sessions) == ["with", "without"]
    assert task.intent == "Summarise the changelog for the release"  # not the marker's copy


@pytest.mark.parametrize(
    ("text", "n_tasks"),
    [
        ('{"tasks": []}', 0),
        ('prose first {"tasks": [{"intent": "abc def ghi", "rubric": "r"}]} prose after', 1),
        ('```json\n{"tasks": [{"intent": "abc def ghi"}]}\n```', 1),
        ('[{"intent": "abc def ghi", "checks": [{"op": "no_refusal"}]}]', 1),
        ('{"sessions": [{"session": "S1", "tasks": [{"intent": "abc def ghi"}]}]}', 1),
        ('{"sessions": [{"session": 1, "tasks": []}]}', 0),
    ],
)
def test_an_entrys_answer_is_read_in_any_shape_the_models_give(text: str, n_tasks: int) -> None:
    answers, problem = read_reply(text, ["S1"])
    assert problem == "" and len(answers["S1"].tasks) == n_tasks


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("no json here", "no JSON in the reply"),
        ('{"tasks": [}', "no JSON in the reply"),
        ('{"tasks": [], "extra": 1}', "no answer for S1"),
        ('{"sessions": [{"session": "S2", "tasks": []}]}', "no answer for S1"),
        ('{"sessions": [{"session": "S1", "tasks": [{"intent": 3}]}]}', "S1: tasks.0.intent"),
        (
            '{"sessions": [{"session": "S1", "tasks": [{"intent": "a", "satisfied": "yes"}]}]}',
            "S1: tasks.0.satisfied",
        ),
        (
            '{"sessions": [{"session": "S1", "tasks": '
            '[{"intent": "a", "checks": [{"op": "x", "arg": [1]}]}]}]}',
            "S1: tasks.0.checks.0.arg",
        ),
    ],
)
def test_an_unusable_answer_is_refused_with_what_was_wrong(text: str, problem: str) -> None:
    answers, said = read_reply(text, ["S1"])
    assert answers == {} and said.startswith(problem)
