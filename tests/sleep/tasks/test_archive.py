"""The task archive (SQLite in a tmp dir): recall order and bounds, retirement, outcomes,
carried edits, mining cache, WAL, corrupt files, and the one-time state.json migration."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skillopt.errors import CorruptStateError
from skillopt.types import EditRecord, Origin, Split, TaskRecord
from skillopt_sleep.harvest import SessionFile, SourceKind
from skillopt_sleep.state import StateStore, project_dir
from skillopt_sleep.tasks.archive import TaskArchive, open_archive
from skillopt_sleep.tasks.recall import share_capacity
from skillopt_sleep.tasks.records import ArchivePolicy, CarriedEditStatus, MinedSession

NOW = datetime(2026, 11, 25, 2, 30, tzinfo=UTC)
DAY = timedelta(days=1)
POLICY = ArchivePolicy(retire_after_passes=3, retire_after_days=30)
SECRET = "ghp_" + "S3cr3t" * 7


def _task(task_id: str, intent: str, *sessions: str, split: Split = Split.TRAIN) -> TaskRecord:
    return TaskRecord(id=task_id, intent=intent, source_sessions=sessions, split=split)


@pytest.fixture
def archive(tmp_path: Path) -> TaskArchive:
    with open_archive(tmp_path / "tasks.sqlite", now=NOW) as opened:
        yield opened  # type: ignore[misc]


def _passes(archive: TaskArchive, night: int, **passed: bool) -> None:
    archive.record_outcomes(
        night=night,
        run_id=f"run-{night}",
        docs_hash=f"docs-{night}",
        scores={k: float(v) for k, v in passed.items()},
        passed=passed,
        now=NOW,
    )


def test_recall_order_bounds_and_exclusions(archive: TaskArchive) -> None:
    archive.record_mined(
        [
            _task("passing_recurring", "format the changelog entry", "s1", "s2"),
            _task("failing_single", "write the migration guide", "s3"),
            _task("unmeasured_recurring", "summarise the pull request", "s4", "s5"),
            _task("passing_old", "rename the config loader", "s6"),
            _task("passing_related", "review the release notes draft", "s7"),
            _task("passing_unrelated", "tidy the docker compose file", "s8"),
            _task("tonight", "something mined again tonight", "s9"),
            _task("held_for_test", "the test split never comes back", "s10", split=Split.TEST),
        ],
        night=1,
        now=NOW,
        seen_at={"passing_old": NOW - 5 * DAY},
    )
    _passes(
        archive,
        1,
        passing_recurring=True,
        failing_single=False,
        passing_old=True,
        passing_related=True,
        passing_unrelated=True,
    )
    tonight = [_task("new", "draft the release notes for version 2")]
    recalled = archive.recall(
        now=NOW + DAY, limit=10, exclude={"tonight"}, related_to=tonight, policy=POLICY
    )
    assert [t.id for t in recalled] == [
        "unmeasured_recurring",  # failing (never measured) and recurring
        "failing_single",  # failing
        "passing_recurring",  # recurring
        "passing_related",  # seen a day ago, shares words with tonight's task
        "passing_unrelated",
        "passing_old",  # seen six days ago
    ]
    assert all(t.origin is Origin.RECALL for t in recalled)
    assert archive.recall(now=NOW + DAY, limit=2, policy=POLICY)[1].id == "failing_single"
    assert archive.recall(now=NOW, limit=0) == []
    # A recalled task recorded again keeps its own id and is stored as mined, not recall.
    archive.record_mined(recalled[:1], night=2, now=NOW)
    stored = archive.task("unmeasured_recurring")
    assert stored is not None and stored.task.origin is Origin.MINED


def test_recurrences_count_distinct_sessions_and_writes_are_idempotent(
    archive: TaskArchive,
) -> None:
    task = _task("t", f"push with token {SECRET}", "s1")
    assert archive.record_mined([task], night=1, now=NOW) == 1
    assert archive.record_mined([task], night=1, now=NOW) == 0
    archive.record_mined([_task("t", "push", "s1", "s2")], night=2, now=NOW + DAY)
    item = archive.task("t")
    assert item is not None
    assert item.recurrences == 2 and item.sessions == ("s1", "s2")
    assert (item.first_night, item.last_night) == (1, 2)
    assert item.first_seen == NOW and item.last_seen == NOW + DAY
    raw = sqlite3.connect(archive.path).execute("SELECT record FROM tasks").fetchall()
    assert SECRET not in str(raw)


def test_retire_after_n_passing_nights(archive: TaskArchive) -> None:
    archive.record_mined([_task("a", "alpha task"), _task("b", "beta task")], night=1, now=NOW)
    _passes(archive, 1, a=True, b=True)
    _passes(archive, 2, a=True, b=False)  # b's streak is broken
    assert archive.retire(now=NOW, policy=POLICY) == []
    _passes(archive, 3, a=True, b=True)
    retired = archive.retire(now=NOW, policy=POLICY)
    assert retired == [("a", "passed on 3 consecutive nights")]
    assert [t.id for t in archive.recall(now=NOW, limit=10, policy=POLICY)] == ["b"]
    stats = archive.stats()
    assert (stats.tasks, stats.active, stats.retired) == (2, 1, 1)
    a = archive.task("a")
    assert a is not None and a.retired and a.retired_why.startswith("passed")
    # Kept, with its history; a failure under later documents brings it back.
    assert [h["passed"] for h in archive.outcome_history("a")] == [True, True, True]
    _passes(archive, 4, a=False)
    assert {t.id for t in archive.recall(now=NOW, limit=10, policy=POLICY)} == {"a", "b"}


def test_retire_after_d_days_unseen_and_come_back_when_seen(archive: TaskArchive) -> None:
    archive.record_mined([_task("old", "an old request")], night=1, now=NOW - 31 * DAY)
    archive.record_mined([_task("fresh", "a fresh request")], night=1, now=NOW - 29 * DAY)
    # Not recalled even before retire() runs: the policy already retires it.
    assert [t.id for t in archive.recall(now=NOW, limit=10, policy=POLICY)] == ["fresh"]
    assert archive.retire(now=NOW, policy=POLICY) == [
        ("old", "not seen in any session for 31 days")
    ]
    assert archive.retire(now=NOW, policy=ArchivePolicy(retire_after_days=0)) == []
    archive.record_mined([_task("old", "an old request", "s9")], night=5, now=NOW)
    again = archive.task("old")
    assert again is not None and not again.retired


def test_share_capacity_gives_leftovers_to_the_other_kind() -> None:
    assert share_capacity(40, available_new=30, available_recalled=30, recall_share=0.5) == (
        20,
        20,
    )
    assert share_capacity(40, available_new=5, available_recalled=50, recall_share=0.5) == (5, 35)
    assert share_capacity(40, available_new=50, available_recalled=3, recall_share=0.5) == (37, 3)
    assert share_capacity(10, available_new=0, available_recalled=50, recall_share=0.0) == (0, 10)
    assert share_capacity(10, available_new=4, available_recalled=4, recall_share=0.25) == (4, 4)


def test_carried_edits(archive: TaskArchive) -> None:
    edit = EditRecord(content="Always put breaking changes first.", rationale="night 1")
    (first,) = archive.carry_edits([edit], seen_task_ids=["a", "b"], night=1, now=NOW)
    assert first.nights_carried == 1 and first.status is CarriedEditStatus.PENDING
    same = EditRecord(content=edit.content, rationale="proposed again")
    (again,) = archive.carry_edits([same], seen_task_ids=["c"], night=2, now=NOW)
    assert again.id == first.id and again.nights_carried == 2
    assert again.seen_task_ids == {"a", "b", "c"} and again.edit.rationale == "proposed again"
    archive.carry_edits([same], seen_task_ids=[], night=2, now=NOW)  # same night: no extra
    assert archive.carried_edits()[0].nights_carried == 2
    archive.resolve_edit(first.id, status=CarriedEditStatus.ACCEPTED, night=3, now=NOW, why="+0.12")
    assert archive.carried_edits() == []
    (done,) = archive.carried_edits(status=None)
    assert done.status is CarriedEditStatus.ACCEPTED and done.why == "+0.12"
    assert archive.stats().pending_edits == 0


def test_mining_cache_round_trip(archive: TaskArchive) -> None:
    assert archive.cached_mining("k1") is None
    entry = MinedSession(
        digest_key="k1", miner="llm", tasks=(_task("t", f"use {SECRET}"),), calls=2
    )
    archive.cache_mining(entry, now=NOW)
    hit = archive.cached_mining("k1")
    assert hit is not None and hit.calls == 2 and hit.miner == "llm"
    assert SECRET not in hit.tasks[0].intent


def test_harvest_marks_and_window(archive: TaskArchive) -> None:
    file = SessionFile(source=SourceKind.CODEX, path="/x/a.jsonl", size=10, mtime_ns=5)
    window = archive.harvest_window(lookback_hours=72, now=NOW)
    assert not window.fixed and window.start == NOW - timedelta(hours=72)
    archive.mark_harvested([], night=1, now=NOW, window=window)
    assert not archive.harvest_window(lookback_hours=72, now=NOW + DAY).fixed  # nothing read
    archive.mark_harvested([file.with_session("s")], night=1, now=NOW, window=window, backlog=4)
    later = archive.harvest_window(lookback_hours=72, now=NOW + 9 * DAY)
    assert later.fixed and later.start == NOW - timedelta(hours=72)  # does not slide
    assert file in archive.harvested_files()
    grown = SessionFile(source=SourceKind.CODEX, path="/x/a.jsonl", size=20, mtime_ns=6)
    assert grown not in archive.harvested_files()
    assert archive.stats().backlog == 4 and archive.stats().harvested_sessions == 1
    assert archive.forget_harvested(since=None) == 1
    assert not archive.harvest_window(lookback_hours=0, now=NOW).fixed


def test_wal_and_one_transaction_per_step(tmp_path: Path) -> None:
    path = tmp_path / "tasks.sqlite"
    with open_archive(path, now=NOW) as archive:
        archive.record_mined([_task("a", "alpha task")], night=1, now=NOW)
        other = sqlite3.connect(path)
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert Path(f"{path}-wal").exists()
        # A step that fails half-way leaves nothing behind.
        with pytest.raises(RuntimeError), archive.transaction():
            archive.record_mined([_task("b", "beta task")], night=1, now=NOW)
            raise RuntimeError("killed mid-step")
        assert [r[0] for r in other.execute("SELECT id FROM tasks")] == ["a"]
        other.close()


_KILLED_BUILDER = """
import os, sqlite3, sys
aside = os.path.join(sys.argv[1], f"tasks.sqlite.new-{os.getpid()}")
conn = sqlite3.connect(aside, isolation_level=None)
conn.execute("PRAGMA journal_mode = WAL")
conn.execute("BEGIN IMMEDIATE")
conn.execute("CREATE TABLE tasks (id TEXT)")
print("building", flush=True)
sys.stdin.read()
"""


def test_a_new_archive_left_half_built_by_a_killed_process_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "tasks.sqlite"
    builder = subprocess.Popen(
        [sys.executable, "-c", _KILLED_BUILDER, str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert builder.stdout is not None and builder.stdout.readline() == "building\n"
    builder.kill()  # the first night dies while its archive is built aside
    builder.wait()
    left = sorted(tmp_path.glob(f"tasks.sqlite.new-{builder.pid}*"))
    assert left and not path.exists()
    alive = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)  # fmt: skip
    try:
        building = tmp_path / f"tasks.sqlite.new-{alive.pid}"  # a live process's build
        building.write_bytes(b"")
        with open_archive(path, now=NOW) as archive:
            archive.record_mined([_task("a", "alpha task")], night=1, now=NOW)
        assert not any(p.exists() for p in left)
        assert building.exists()  # not ours to remove while its process runs
    finally:
        alive.communicate()
    with open_archive(path, now=NOW) as archive:
        assert [t.id for t in archive.tasks()] == ["a"]
    assert not building.exists()  # its process has ended since


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"this is not a database at all" * 100, "not a usable task archive"),
        (b"", "an empty file"),  # truncated to nothing: never a fresh archive in its place
        (b"SQLite format 2\x00" + bytes(200), "not an SQLite database"),
    ],
)
def test_unreadable_archive_is_an_error_naming_the_file(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "tasks.sqlite"
    path.write_bytes(content)
    with pytest.raises(CorruptStateError) as caught:
        open_archive(path, now=NOW)
    assert str(path) in str(caught.value) and reason in str(caught.value)
    assert path.read_bytes() == content  # never reset


def test_truncated_or_foreign_or_newer_archive_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tasks.sqlite"
    with open_archive(path, now=NOW) as archive:
        archive.record_mined([_task(f"t{i}", "x" * 2000) for i in range(50)], night=1, now=NOW)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptStateError, match=r"tasks\.sqlite"), open_archive(path, now=NOW) as a:
        a.tasks()

    foreign = tmp_path / "foreign.sqlite"
    sqlite3.connect(foreign).execute("CREATE TABLE other (x)").connection.commit()
    with pytest.raises(CorruptStateError, match="not a task archive"):
        open_archive(foreign, now=NOW)

    newer = tmp_path / "newer.sqlite"
    open_archive(newer, now=NOW).close()
    conn = sqlite3.connect(newer)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(CorruptStateError, match="schema 99 is newer"):
        open_archive(newer, now=NOW)


def test_migrates_state_json_once(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    store = StateStore(tmp_path / "state")
    cursor = NOW - 2 * DAY
    state = store.load(project).with_cursor(cursor)
    state = state.archive_tasks([_task("old1", "an archived task", "s1"), _task("old2", "two")])
    store.save(state)
    path = project_dir(tmp_path / "state", project) / "tasks.sqlite"

    with open_archive(path, now=NOW) as archive:
        assert {t.id for t in archive.tasks()} == {"old1", "old2"}
        window = archive.harvest_window(lookback_hours=72, now=NOW)
        assert window.fixed and window.start == cursor  # older sessions: pending, outside
        assert archive.harvested_files() == frozenset()  # nothing assumed harvested
        assert "2 task(s)" in archive.stats().migrated
        assert "harvest --since" in archive.stats().migrated

    store.save(store.load(project).archive_tasks([_task("later", "after the migration")]))
    with open_archive(path, now=NOW) as archive:
        assert {t.id for t in archive.tasks()} == {"old1", "old2"}  # once only


def test_corrupt_state_json_stops_the_migration(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(CorruptStateError, match=r"state\.json"):
        open_archive(tmp_path / "tasks.sqlite", now=NOW)


def test_a_row_that_no_longer_decodes_is_corruption(archive: TaskArchive) -> None:
    archive.record_mined([_task("a", "alpha task")], night=1, now=NOW)
    conn = sqlite3.connect(archive.path)
    conn.execute("""UPDATE tasks SET record = '{"id": "a"}'""")
    conn.commit()
    conn.close()
    with pytest.raises(CorruptStateError, match="task a: TaskRecord: intent"):
        archive.tasks()


def test_a_busy_archive_says_what_is_known_about_who_writes_it(tmp_path: Path) -> None:
    """SQLite does not say who holds its write lock: the message names the night holding
    the project's lock when there is one, and otherwise does not blame a skillopt night."""
    import subprocess
    import sys

    from skillopt.errors import LockHeldError
    from skillopt_sleep.tasks.archive_db import sqlite_errors

    state, project = tmp_path / "state", tmp_path / "proj"
    project.mkdir()
    db = project_dir(state, project) / "tasks.sqlite"
    with open_archive(db):
        pass

    def busy() -> str:
        with pytest.raises(LockHeldError) as caught, sqlite_errors(db):
            raise sqlite3.OperationalError("database is locked")
        return str(caught.value)

    alone = busy()
    assert "another skillopt-sleep process" not in alone
    assert "SQLite does not say whose" in alone and "no other night of this project" in alone

    hold = (
        "import sys; from pathlib import Path; from skillopt_sleep.lock import project_lock\n"
        f"with project_lock(Path({str(state)!r}), Path({str(project)!r}), command='once'):\n"
        "    print('held', flush=True); sys.stdin.read()\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        named = busy()
    finally:
        holder.communicate("", timeout=30)
    assert (
        f"pid {holder.pid}" in named and "(once)" in named and "holds this project's lock" in named
    )
