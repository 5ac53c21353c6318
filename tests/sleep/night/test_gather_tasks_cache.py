"""Mining goes through the archive's cache: a night killed during mining and run again pays
only for the sessions it never got an answer for (model calls counted on a real loopback
HTTP server), a re-harvested session is not mined twice, a failed call is asked again."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from skillopt.backends.base import Completer, Completion, CompletionRequest
from skillopt.backends.pool import BackendPool
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.night.gather_tasks import Gathered, commit_gathered, gather_night
from skillopt_sleep.tasks.archive import open_archive
from support.fake_model_server import FakeModelServer, Reply
from support.mining_replies import batch_reply
from support.pools import one_member_pool
from support.transcripts import Turn, write_claude_session

NOW = datetime(2026, 11, 25, 2, 30, tzinfo=UTC)
SESSIONS = ("alpha", "beta", "gamma", "delta")


def _tasks(entry: str) -> list[dict[str, str]]:
    name = next(s for s in SESSIONS if f"topic {s}" in entry)
    return [{"intent": f"Handle the {name} request", "rubric": "Does it"}]


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(reply_fn=batch_reply(_tasks)) as srv:
        yield srv


class _KilledMidway:
    """Passes calls for the first sessions through; the others never answer (the night is
    killed while they are in flight). ``answered`` fires once the first ones landed."""

    def __init__(self, pool: BackendPool, answer: set[str]) -> None:
        self.pool = pool
        self.answer = answer
        self.landed = 0
        self.answered = anyio.Event()

    async def complete(self, request: CompletionRequest) -> Completion:
        if not any(f"topic {s}" in request.prompt for s in self.answer):
            await anyio.sleep_forever()
        done = await self.pool.complete(request)
        self.landed += 1
        if self.landed == len(self.answer):
            self.answered.set()
        return done


@pytest.fixture
def setup(tmp_path: Path) -> tuple[SleepConfig, Path, Path]:
    claude, project = tmp_path / "claude", tmp_path / "proj"
    project.mkdir()
    for i, name in enumerate(SESSIONS):
        write_claude_session(
            claude,
            cwd=project,
            turns=[Turn(user=f"Please look at topic {name} for me")],
            start=NOW - timedelta(hours=i + 1),
            session_id=name,
        )
    sources = {"kinds": ["claude_code"], "claude_home": str(claude), "lookback_hours": 0}
    # a bound no two sessions fit in together: each is mined by a call of its own
    cfg = SleepConfig.model_validate({"sources": sources, "night": {"mine_call_tokens": 500}})
    return cfg, project, tmp_path / "state" / "tasks.sqlite"


async def _gather(
    cfg: SleepConfig, project: Path, db: Path, pool: Completer, *, commit: bool = False
) -> Gathered:
    with open_archive(db, now=NOW) as archive:
        got = await gather_night(
            cfg, project=project, archive=archive, pool=pool, use_llm=True, now=NOW
        )
        if commit:
            commit_gathered(archive, got, night=1, now=NOW)
    return got


async def test_a_resumed_night_does_not_pay_for_mining_again(
    server: FakeModelServer, setup: tuple[SleepConfig, Path, Path]
) -> None:
    cfg, project, db = setup
    async with one_member_pool(server) as pool:
        killed = _KilledMidway(pool, answer={"alpha", "beta"})
        async with anyio.create_task_group() as group:
            group.start_soon(_gather, cfg, project, db, killed)
            await killed.answered.wait()
            group.cancel_scope.cancel()  # the night dies with gamma and delta in flight
        assert len(server.requests) == 2

        resumed = await _gather(cfg, project, db, pool)
        assert len(server.requests) == 4  # only gamma and delta were paid for
        mine = resumed.diagnostics["mine"]
        assert (mine["cached"], mine["mined_now"], mine["calls"]) == (2, 2, 2)
        assert {t.intent for t in resumed.tasks} == {f"Handle the {s} request" for s in SESSIONS}

        again = await _gather(cfg, project, db, pool, commit=True)
        assert len(server.requests) == 4 and again.diagnostics["mine"]["calls"] == 0

        with open_archive(db, now=NOW) as archive:
            assert archive.forget_harvested(since=None) == 4  # re-harvest everything
        reharvested = await _gather(cfg, project, db, pool)
        assert reharvested.n_sessions == 4 and len(server.requests) == 4


async def test_a_failed_call_is_not_cached(
    server: FakeModelServer, setup: tuple[SleepConfig, Path, Path]
) -> None:
    cfg, project, db = setup
    server.script("opt", Reply(status=400))
    async with one_member_pool(server) as pool:
        first = await _gather(cfg, project, db, pool)
        fallbacks = first.diagnostics["mine"]["fallbacks"]
        assert len(fallbacks) == 1 and fallbacks[0]["cause"].startswith("call failed")
        second = await _gather(cfg, project, db, pool)
    assert second.diagnostics["mine"]["calls"] == 1  # only the session whose call failed
    assert second.diagnostics["mine"]["fallbacks"] == []
    assert len(server.requests) == 5
