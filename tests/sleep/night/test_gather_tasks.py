"""The per-session harvest cursor through the night's gather API, on real transcript files:
no session is ever skipped, the window never consumes history, tasks-file nights leave the
cursor alone, and a night's task set mixes new and recalled tasks."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skillopt.backends.base import Completion, CompletionRequest
from skillopt.types import Origin, TaskRecord
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.mining.tasks_file import write_tasks_file
from skillopt_sleep.night.gather_tasks import Gathered, commit_gathered, gather_night
from skillopt_sleep.tasks.archive import TaskArchive, open_archive
from support.transcripts import Turn, write_claude_session

NOW = datetime(2026, 11, 25, 2, 30, tzinfo=UTC)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


class _NoModel:
    """The heuristic miner needs no model: any call is a bug."""

    async def complete(self, request: CompletionRequest) -> Completion:
        raise AssertionError("no model call expected")


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.claude = root / "claude"
        self.project = root / "proj"
        self.project.mkdir(parents=True)
        self.archive_path = root / "state" / "tasks.sqlite"

    def session(self, sid: str, request: str, *, ended: datetime, cwd: Path | None = None) -> Path:
        return write_claude_session(
            self.claude,
            cwd=cwd or self.project,
            turns=[Turn(user=request)],
            start=ended - timedelta(minutes=2),
            session_id=sid,
        )

    def config(self, **night: object) -> SleepConfig:
        lookback = night.pop("lookback_hours", 72)
        max_sessions = night.pop("max_sessions", 0)
        return SleepConfig.model_validate(
            {
                "state_dir": str(self.root / "state"),
                "sources": {
                    "kinds": ["claude_code"],
                    "claude_home": str(self.claude),
                    "lookback_hours": lookback,
                    "max_sessions": max_sessions,
                },
                "night": {"llm_mine": False, **night},
            }
        )

    def open(self) -> TaskArchive:
        return open_archive(self.archive_path, now=NOW)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


async def _night(
    world: World,
    cfg: SleepConfig,
    *,
    night: int,
    now: datetime,
    commit: bool = True,
    tasks_file: Path | None = None,
) -> Gathered:
    with world.open() as archive:
        got = await gather_night(
            cfg,
            project=world.project,
            archive=archive,
            pool=_NoModel(),
            use_llm=False,
            now=now,
            tasks_file=tasks_file,
        )
        if commit:
            commit_gathered(archive, got, night=night, now=now)
    return got


def _sessions(got: Gathered) -> list[str]:
    return sorted(s for t in got.new_tasks for s in t.source_sessions)


async def test_sessions_over_max_sessions_wait_for_the_next_nights(world: World) -> None:
    for i in range(7):
        world.session(f"s{i}", f"Request number {i} about the release", ended=NOW - i * HOUR)
    cfg = world.config(max_sessions=3, max_tasks=20)

    first = await _night(world, cfg, night=1, now=NOW)
    assert _sessions(first) == ["s0", "s1", "s2"]  # newest first
    assert first.backlog == 4
    assert any("4 pending session(s) wait for the next nights" in n for n in first.notes)
    with world.open() as archive:
        assert archive.stats().backlog == 4

    second = await _night(world, cfg, night=2, now=NOW + DAY)
    assert _sessions(second) == ["s3", "s4", "s5"] and second.backlog == 1
    third = await _night(world, cfg, night=3, now=NOW + 2 * DAY)
    assert [s for t in third.new_tasks for s in t.source_sessions] == ["s6"]
    assert third.backlog == 0
    fourth = await _night(world, cfg, night=4, now=NOW + 3 * DAY)
    assert fourth.n_sessions == 0
    assert {t.id for t in fourth.tasks} <= {t.id for t in (*first.mined, *second.mined)} | {
        t.id for t in third.mined
    }  # a night with no new session replays the archive
    assert fourth.tasks and all(t.origin is Origin.RECALL for t in fourth.tasks)
    assert "no new session tonight: learning from the archive" in fourth.notes
    with world.open() as archive:
        assert archive.stats().tasks == 7


async def test_an_uncommitted_night_consumes_nothing(world: World) -> None:
    world.session("a", "Write the weekly status update", ended=NOW - HOUR)
    cfg = world.config()
    failed = await _night(world, cfg, night=1, now=NOW, commit=False)
    assert _sessions(failed) == ["a"]
    again = await _night(world, cfg, night=1, now=NOW + HOUR)
    assert _sessions(again) == ["a"]
    assert (await _night(world, cfg, night=2, now=NOW + DAY)).n_sessions == 0


async def test_a_session_that_grows_is_harvested_again(world: World) -> None:
    path = world.session("grow", "Summarise the incident report", ended=NOW - HOUR)
    cfg = world.config()
    first = await _night(world, cfg, night=1, now=NOW)
    assert first.n_sessions == 1
    assert (await _night(world, cfg, night=2, now=NOW + HOUR)).n_sessions == 0
    world.session("grow", "Summarise the incident report, and list follow-ups", ended=NOW)
    assert path.exists()
    grown = await _night(world, cfg, night=3, now=NOW + 2 * HOUR)
    assert grown.n_sessions == 1
    with world.open() as archive:
        assert archive.stats().harvested_sessions == 1  # one file, its newest version


async def test_old_sessions_are_outside_the_window_not_consumed(world: World) -> None:
    for i in range(3):
        world.session(f"old{i}", f"A week-old request {i}", ended=NOW - 7 * DAY - i * HOUR)
    world.session("other", "Another project's request", ended=NOW - 7 * DAY, cwd=world.root)
    cfg = world.config()
    empty = await _night(world, cfg, night=1, now=NOW)
    assert empty.tasks == () and empty.outside_window == 3  # the other project's not counted
    assert empty.why_nothing == (
        "3 session(s) are older than the lookback window of 72h; widen it with "
        "sources.lookback_hours or run `skillopt-sleep harvest --since DATE`"
    )
    again = await _night(world, cfg, night=2, now=NOW + DAY)  # still there, still outside
    assert again.outside_window == 3
    wider = await _night(world, world.config(lookback_hours=24 * 30), night=3, now=NOW + DAY)
    assert _sessions(wider) == ["old0", "old1", "old2"]
    assert wider.why_nothing == ""


async def test_the_window_stops_sliding_once_harvesting_began(world: World) -> None:
    world.session("first", "The first request of the project", ended=NOW - HOUR)
    cfg = world.config()
    await _night(world, cfg, night=1, now=NOW)
    # The machine was off for a week; a session from just after night 1 is older than
    # `now - lookback` by the time the next night runs, and must not be lost.
    world.session("while_away", "A request made while the nights were off", ended=NOW + HOUR)
    late = await _night(world, cfg, night=2, now=NOW + 8 * DAY)
    assert _sessions(late) == ["while_away"]
    nothing = await _night(world, cfg, night=3, now=NOW + 9 * DAY)
    assert nothing.n_sessions == 0


async def test_explanation_once_the_window_is_fixed(world: World) -> None:
    world.session("recent", "A recent request", ended=NOW - HOUR)
    world.session("ancient", "A request from last month", ended=NOW - 30 * DAY)
    cfg = world.config(retire_after_days=1)
    await _night(world, cfg, night=1, now=NOW)
    later = await _night(world, cfg, night=2, now=NOW + 3 * DAY)  # recent task retired
    assert later.tasks == ()
    assert later.why_nothing.startswith("no new session since the last harvest; 1 older")
    assert "skillopt-sleep harvest --since DATE" in later.why_nothing


async def test_tasks_file_nights_leave_the_cursor_alone(world: World) -> None:
    world.session("a", "Write the weekly status update", ended=NOW - HOUR)
    world.session("b", "Review the dependency bump", ended=NOW - 2 * HOUR)
    tasks_file = world.root / "tasks.json"
    write_tasks_file(
        tasks_file,
        [TaskRecord(id="manual_1", intent="A reviewed task from the file")],
        generated_at=NOW,
        metadata={"project": str(world.project)},
    )
    cfg = world.config()
    from_file = await _night(world, cfg, night=1, now=NOW, tasks_file=tasks_file)
    assert [t.id for t in from_file.tasks] == ["manual_1"]
    assert from_file.sessions == ()
    with world.open() as archive:
        stats = archive.stats()
        assert stats.harvested_sessions == 0 and stats.tasks == 0
        assert not archive.harvest_window(lookback_hours=72, now=NOW).fixed
    after = await _night(world, cfg, night=2, now=NOW + HOUR)
    assert _sessions(after) == ["a", "b"]


async def test_new_and_recalled_tasks_share_max_tasks(world: World) -> None:
    for i in range(6):
        world.session(f"n1_{i}", f"First week request {i} on the parser", ended=NOW - i * HOUR)
    cfg = world.config(max_tasks=4, recall_share=0.5)
    first = await _night(world, cfg, night=1, now=NOW)
    assert len(first.tasks) == 4 and first.n_recalled == 0  # nothing to recall yet
    assert len(first.mined) == 6
    assert any("2 of 6 mined task(s) are archived for later nights" in n for n in first.notes)
    for i in range(5):
        world.session(f"n2_{i}", f"Second week request {i} on the lexer", ended=NOW + DAY)
    second = await _night(world, cfg, night=2, now=NOW + 2 * DAY)
    assert len(second.new_tasks) == 2 and second.n_recalled == 2
    recalled = second.recalled
    assert recalled and {t.id for t in recalled} <= {t.id for t in first.mined}
    assert [t.origin for t in second.tasks[2:]] == [Origin.RECALL, Origin.RECALL]
    restored = Gathered.restore(list(second.tasks), second.checkpoint())
    assert restored == second  # a resumed night commits exactly what the original would


async def test_out_of_scope_and_self_generated_files_are_consumed_once(world: World) -> None:
    other = world.root / "elsewhere"
    world.session("theirs", "Another project's request", ended=NOW - HOUR, cwd=other)
    world.session("ours", "Our project's request", ended=NOW - 2 * HOUR)
    cfg = world.config()
    first = await _night(world, cfg, night=1, now=NOW)
    assert _sessions(first) == ["ours"]
    assert {os.path.basename(f.path) for f in first.sessions} == {"theirs.jsonl", "ours.jsonl"}
    second = await _night(world, cfg, night=2, now=NOW + HOUR)
    assert second.diagnostics["harvest"]["files_read"] == 0
