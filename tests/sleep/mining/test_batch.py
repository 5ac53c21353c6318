"""Mining pays once per request, not once per session (issue 21): sessions that opened with
the same request are one entry, several entries share a call within the token bound, a
garbled entry costs only itself a re-ask, and the cache serves every session of a group.
Real transcripts, the night's gathering stage, a real pool on a loopback HTTP server."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from skillopt.backends.base import Completer
from skillopt.backends.mock import MockBackend
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.mining.batch import mine_llm_cached
from skillopt_sleep.night.gather_tasks import Gathered, gather_night
from skillopt_sleep.tasks.archive import open_archive
from support.fake_model_server import FakeModelServer, Request
from support.mining_replies import answer, batch_reply, entries
from support.pools import one_member_pool
from support.transcripts import Turn, write_claude_session

NOW = datetime(2026, 11, 25, 2, 30, tzinfo=UTC)
SECRET = "ghp_" + "M1n1ng" * 7
REQUESTS = {
    "requests dependency": "Bump the requests dependency to the latest patch release.",
    "release notes": "Write the weekly release notes from the changelog.",
    "staging database": "Rotate the staging database credentials.",
    "pull requests": "Summarise the open pull requests for standup.",
}
DECOYS = (
    "Explain the difference between a process and a thread in Python.",
    "What does the walrus operator do? I keep forgetting.",
)
LIMIT = "Keep it under 300 characters please"


def _tasks(entry: str) -> list[dict[str, Any]]:
    """What a model reading one entry answers: the recurring request, none for a one-off."""
    subject = next((s for s in REQUESTS if s in entry.casefold()), None)
    if subject is None:
        return []
    if LIMIT in entry:  # the checks say it all
        return [{"intent": REQUESTS[subject], "checks": [{"op": "max_chars", "arg": 300}]}]
    return [{"intent": REQUESTS[subject], "rubric": "Does what was asked", "checks": []}]


def _openings(request: str) -> list[str]:
    """The same request typed six ways that differ only in case and punctuation."""
    bare = request.rstrip(".")
    return [request, bare.lower(), f"{bare}!", f"{bare.upper()}.", f"  {bare} ", f"{bare}?"]


def _write_history(claude: Path, project: Path) -> list[str]:
    ids: list[str] = []
    hour = 0
    for subject, request in REQUESTS.items():
        for i, opening in enumerate(_openings(request)):
            later = [LIMIT] if i == 0 else ["thanks, that works"] if i == 1 else []
            if subject == "staging database" and i == 2:
                later = [f"use the token {SECRET} for it"]
            hour += 1
            sid = f"{subject.replace(' ', '-')}-{i}"
            turns = [Turn(user=opening), *(Turn(user=t) for t in later)]
            write_claude_session(
                claude, cwd=project, turns=turns, start=NOW - timedelta(hours=hour), session_id=sid
            )
            ids.append(sid)
    for i, ask in enumerate(DECOYS):
        hour += 1
        write_claude_session(
            claude, cwd=project, turns=[Turn(user=ask), Turn(user="thanks")],
            start=NOW - timedelta(hours=hour), session_id=f"decoy-{i}",
        )  # fmt: skip
    return ids


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    claude, project = tmp_path / "claude", tmp_path / "proj"
    project.mkdir()
    _write_history(claude, project)
    return claude, project, tmp_path / "state" / "tasks.sqlite"


def _cfg(claude: Path, **night: Any) -> SleepConfig:
    sources = {"kinds": ["claude_code"], "claude_home": str(claude), "lookback_hours": 0}
    return SleepConfig.model_validate({"sources": sources, "night": night})


async def _gather(cfg: SleepConfig, project: Path, db: Path, pool: Completer) -> Gathered:
    with open_archive(db, now=NOW) as archive:
        return await gather_night(
            cfg, project=project, archive=archive, pool=pool, use_llm=True, now=NOW
        )


def _found(gathered: Gathered) -> dict[str, tuple[Any, ...]]:
    return {
        t.id: (t.intent, t.checks, t.outcome, tuple(sorted(t.source_sessions)))
        for t in gathered.mined
    }


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(reply_fn=batch_reply(_tasks)) as srv:
        yield srv


async def test_many_sessions_of_few_requests_cost_a_call_per_request_at_most(
    server: FakeModelServer, setup: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    claude, project, db = setup
    async with one_member_pool(server) as pool:
        shared = await _gather(_cfg(claude), project, db, pool)
        calls_shared = len(server.requests)
        # a bound no two entries fit in: each request (and each one-off) its own call
        alone = await _gather(_cfg(claude, mine_call_tokens=500), project, tmp_path / "b.db", pool)
    calls_alone = len(server.requests) - calls_shared

    mine = shared.diagnostics["mine"]
    assert (mine["sessions"], mine["requests"]) == (26, 6)  # 4 requests x 6 + 2 one-offs
    assert calls_shared == mine["calls"] == 1
    assert calls_alone == alone.diagnostics["mine"]["calls"] == 6  # never more than a request
    found = _found(shared)
    assert found == _found(alone)  # the same tasks however the calls were shared
    assert {intent for intent, *_ in found.values()} == set(REQUESTS.values())  # no one-off
    assert all(len(sessions) == 6 for *_, sessions in found.values())
    assert all(checks for _, checks, *_ in found.values())  # one session's limit, for all
    assert not any(SECRET in r.raw_body.decode() for r in server.requests)
    assert any("[REDACTED:" in r.user_text for r in server.requests)


async def test_a_garbled_entry_costs_only_itself_a_reask(
    setup: tuple[Path, Path, Path],
) -> None:
    claude, project, db = setup
    asked_again: list[list[str]] = []

    def garble_release_notes(request: Request) -> str:
        text = request.user_text
        if "could not be used" in text:
            asked_again.append([label for label, _ in entries(text)])
            return answer(text, _tasks)
        return answer(text, lambda e: "oops" if "release notes" in e.casefold() else _tasks(e))

    with FakeModelServer(reply_fn=garble_release_notes) as server:
        async with one_member_pool(server) as pool:
            got = await _gather(_cfg(claude), project, db, pool)
    mine = got.diagnostics["mine"]
    assert (mine["calls"], mine["reasked"], mine["fallbacks"]) == (2, 1, [])
    (labels,) = asked_again
    assert len(labels) == 1  # only the garbled entry was asked again
    assert {t.intent for t in got.mined} == set(REQUESTS.values())


async def test_an_entry_never_answered_falls_back_alone(setup: tuple[Path, Path, Path]) -> None:
    claude, project, db = setup

    def skip_staging(entry: str) -> Any:
        return None if "staging database" in entry.casefold() else _tasks(entry)

    with FakeModelServer(reply_fn=batch_reply(skip_staging)) as server:
        async with one_member_pool(server) as pool:
            got = await _gather(_cfg(claude), project, db, pool)
        assert len(server.requests) == 2  # the call and one re-ask: bounded
    mine = got.diagnostics["mine"]
    assert len(mine["fallbacks"]) == 6  # the six staging sessions, and only they
    assert all(f["session_id"].startswith("staging") for f in mine["fallbacks"])
    assert all("no answer for" in f["cause"] for f in mine["fallbacks"])
    llm = {t.intent for t in got.mined if t.id.startswith("llm_")}
    assert llm == set(REQUESTS.values()) - {REQUESTS["staging database"]}
    heuristic = [t for t in got.mined if t.id.startswith("h_")]
    assert len(heuristic) == 1 and len(heuristic[0].source_sessions) == 6


async def test_a_groups_cache_entry_serves_each_session_next_night(
    server: FakeModelServer, setup: tuple[Path, Path, Path]
) -> None:
    claude, project, db = setup
    async with one_member_pool(server) as pool:
        first = await _gather(_cfg(claude), project, db, pool)
        assert len(server.requests) == 1
        again = await _gather(_cfg(claude), project, db, pool)
        assert len(server.requests) == 1  # nothing paid twice
        mine = again.diagnostics["mine"]
        assert (mine["cached"], mine["mined_now"], mine["calls"]) == (26, 0, 0)
        assert _found(again) == _found(first)

        write_claude_session(
            claude, cwd=project, turns=[Turn(user="rotate the staging database credentials")],
            start=NOW - timedelta(minutes=30), session_id="staging-new",
        )  # fmt: skip
        grown = await _gather(_cfg(claude), project, db, pool)
    mine = grown.diagnostics["mine"]
    assert (mine["cached"], mine["mined_now"], mine["calls"]) == (26, 1, 1)
    (staging,) = [t for t in grown.mined if t.intent == REQUESTS["staging database"]]
    assert "staging-new" in staging.source_sessions and len(staging.source_sessions) == 7


async def test_the_mock_answers_every_entry_of_a_shared_call(
    setup: tuple[Path, Path, Path],
) -> None:
    """The mock world has no recurring request: each entry gets an empty answer, so
    nothing is asked again and no session falls back on its own."""
    claude, project, db = setup
    mock = MockBackend()
    with open_archive(db, now=NOW) as archive:
        from skillopt_sleep.night.gather_tasks import collect

        digests = collect(_cfg(claude), project=project, since=None).digests
        batch = await mine_llm_cached(
            mock, digests, archive=archive, project=str(project), clock=lambda: NOW
        )
    assert mock.calls == batch.diagnostics["calls"] == 1
    assert (batch.diagnostics["reasked"], batch.diagnostics["fallbacks"]) == (0, [])
