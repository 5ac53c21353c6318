"""One request, one task, whichever miner read it: switching ``night.llm_mine`` between
nights keeps each miner's ids, and the archive's request keys make a heuristic task of a
request an LLM task owns that task (heuristic night after an LLM night) or its retired
duplicate (LLM night after a heuristic night). Paraphrases the LLM miner merges stay one
task. Real files, a real archive, mining calls answered by a loopback HTTP server."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skillopt.backends.base import Completer
from skillopt.types import TaskRecord
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.night.gather_tasks import Gathered, commit_gathered, gather_night
from skillopt_sleep.tasks.archive import TaskArchive, open_archive
from skillopt_sleep.tasks.archive_aliases import DUPLICATE
from skillopt_sleep.tasks.records import ArchivedTask
from support.fake_model_server import FakeModelServer
from support.mining_replies import batch_reply
from support.pools import one_member_pool
from support.transcripts import Turn, write_claude_session

NOW = datetime(2026, 11, 25, 2, 30, tzinfo=UTC)
LIFT = "Bump the lift package version"
NOTES = "Write the release notes"
# Three wordings of one request (the lift world's kind) and one other request.
OPENINGS = {
    "p1": "Please bump the lift version for the release",
    "p2": "Could you raise lift's version number before we ship",
    "p3": "The lift version needs incrementing, do it please",
    "notes": "Please write the release notes for this week",
}


def _tasks(entry: str) -> list[dict[str, str]]:
    intent = LIFT if "lift" in entry else NOTES
    return [{"intent": intent, "rubric": "Does what was asked"}]


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(reply_fn=batch_reply(_tasks)) as srv:
        yield srv


class World:
    def __init__(self, root: Path) -> None:
        self.claude, self.project = root / "claude", root / "proj"
        self.project.mkdir()
        self.db = root / "state" / "tasks.sqlite"
        sources = {"kinds": ["claude_code"], "claude_home": str(self.claude), "lookback_hours": 0}
        self.cfg = SleepConfig.model_validate({"sources": sources})
        self.written = 0

    def session(self, name: str, opening: str) -> None:
        self.written += 1
        write_claude_session(
            self.claude,
            cwd=self.project,
            turns=[Turn(user=opening)],
            start=NOW - timedelta(hours=10 - self.written),
            session_id=name,
        )

    async def night(self, n: int, *, pool: Completer | None, reharvest: bool = True) -> Gathered:
        now = NOW + timedelta(days=n)
        with open_archive(self.db, now=now) as archive:
            if reharvest:  # the same sessions read again by the other miner
                archive.forget_harvested(since=None)
            got = await gather_night(
                self.cfg, project=self.project, archive=archive, pool=pool,
                use_llm=pool is not None, now=now,
            )  # fmt: skip
            commit_gathered(archive, got, night=n, now=now)
        return got

    def active(self) -> dict[str, str]:
        """Active archived task id -> intent."""
        with open_archive(self.db, now=NOW) as archive:
            return {t.id: t.task.intent for t in _active(archive)}


def _active(archive: TaskArchive) -> list[ArchivedTask]:
    gone = archive.superseded_ids()
    return [t for t in archive.tasks(include_retired=False) if t.id not in gone]


def _ids(tasks: tuple[TaskRecord, ...]) -> set[str]:
    return {t.id for t in tasks}


@pytest.fixture
def world(tmp_path: Path) -> World:
    w = World(tmp_path)
    for name in ("p1", "p2", "notes"):
        w.session(name, OPENINGS[name])
    return w


async def test_paraphrases_stay_one_task_under_the_llm_miner(
    server: FakeModelServer, world: World
) -> None:
    async with one_member_pool(server) as pool:
        got = await world.night(1, pool=pool)
    assert len(got.mined) == 2 and all(t.id.startswith("llm_") for t in got.mined)
    lift = next(t for t in got.mined if t.intent == LIFT)
    assert set(lift.source_sessions) == {"p1", "p2"}
    with open_archive(world.db, now=NOW) as archive:
        assert len(archive.request_keys_of(lift.id)) == 2  # one task, both wordings


async def test_a_heuristic_night_after_an_llm_night_maps_to_the_llm_tasks(
    server: FakeModelServer, world: World
) -> None:
    async with one_member_pool(server) as pool:
        first = await world.night(1, pool=pool)
    world.session("p2-again", OPENINGS["p2"])  # a new session of a known request

    second = await world.night(2, pool=None)

    assert second.diagnostics["mine"]["miner"] == "heuristic"
    assert _ids(second.tasks) == _ids(first.mined)  # tonight's set: the llm tasks, once each
    assert set(second.diagnostics["mine"]["aliased"].values()) == _ids(first.mined)
    active = world.active()
    assert sorted(active.values()) == sorted([LIFT, NOTES])
    assert all(i.startswith("llm_") for i in active)
    lift = next(t for t in second.mined if t.intent == LIFT)
    assert {"p1", "p2", "p2-again"} <= set(lift.source_sessions)
    with open_archive(world.db, now=NOW) as archive:
        assert archive.task(lift.id).recurrences == 3  # type: ignore[union-attr]

    third = await world.night(3, pool=None)  # and again: still no heuristic twin
    assert all(i.startswith("llm_") for i in _ids(third.tasks))
    assert len(world.active()) == 2


async def test_an_llm_night_after_a_heuristic_night_retires_the_heuristic_twins(
    server: FakeModelServer, world: World
) -> None:
    first = await world.night(1, pool=None)
    assert len(first.mined) == 3 and all(t.id.startswith("h_") for t in first.mined)
    world.session("p3", OPENINGS["p3"])  # a new wording of the known request

    async with one_member_pool(server) as pool:
        second = await world.night(2, pool=pool)

    assert all(t.id.startswith("llm_") for t in second.tasks)  # no heuristic twin recalled
    active = world.active()
    assert sorted(active.values()) == sorted([LIFT, NOTES])
    with open_archive(world.db, now=NOW) as archive:
        twins = {t.id: t.retired_why for t in archive.tasks() if t.id.startswith("h_")}
        assert set(twins) == _ids(first.mined)
        lift = next(i for i, intent in active.items() if intent == LIFT)
        assert all(why.startswith(DUPLICATE) for why in twins.values())
        assert sum(lift in why for why in twins.values()) == 2  # both lift wordings
        assert len(archive.request_keys_of(lift)) == 3

    # a failing outcome does not bring a duplicate back, and the heuristic miner, switched
    # back, maps a known wording to the llm task
    with open_archive(world.db, now=NOW) as archive:
        h1 = next(i for i, why in twins.items() if lift in why)
        archive.record_outcomes(night=2, run_id="r", docs_hash="d", scores={h1: 0.0},
                                passed={h1: False}, now=NOW)  # fmt: skip
    third = await world.night(3, pool=None)
    assert _ids(third.tasks) == set(active)
    assert len(world.active()) == 2


def test_an_older_archive_learns_its_heuristic_tasks_request_keys(tmp_path: Path) -> None:
    path = tmp_path / "tasks.sqlite"
    with open_archive(path, now=NOW) as archive:
        archive.record_mined(
            [TaskRecord(id="h_abc", intent="a"), TaskRecord(id="llm_def", intent="b")],
            night=1,
            now=NOW,
        )
    conn = sqlite3.connect(path)  # what schema 4's code left behind
    conn.execute("DROP TABLE request_keys")
    conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()

    with open_archive(path, now=NOW) as archive:
        assert archive.request_key_owners(["h_abc", "llm_def"]) == {"h_abc": {"h_abc"}}
        archive.record_mined([TaskRecord(id="llm_def", intent="b")], night=2, now=NOW,
                             request_keys={"llm_def": ["h_abc"]})  # fmt: skip
        retired = archive.task("h_abc")
        assert retired is not None and retired.retired_why.startswith(DUPLICATE + "llm_def")
