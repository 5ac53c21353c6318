"""Per-project state: round trip, UTC cursor, caps, corrupt files raise, project keys."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from skillopt.errors import CorruptStateError
from skillopt.types import Split, TaskRecord
from skillopt_sleep.night_end import RunStatus
from skillopt_sleep.state import (
    ARCHIVE_CAP,
    HISTORY_CAP,
    NightEntry,
    StateStore,
    project_key,
    runs_dir,
)

NOW = datetime(2026, 11, 25, 2, 30, tzinfo=UTC)


def _entry(n: int) -> NightEntry:
    return NightEntry(night=n, run_id=f"r{n}", started_at=NOW, status=RunStatus.COMPLETE, n_tasks=3)


def test_fresh_state_then_round_trip(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    store = StateStore(tmp_path / "state")
    state = store.load(project)
    assert state.night == 0 and state.harvest_cursor is None
    assert state.project == os.path.realpath(project)

    state, night = state.begin_night()
    assert night == 1
    plus_nine = timezone(timedelta(hours=9))
    state = state.with_cursor(datetime(2026, 11, 25, 11, 30, tzinfo=plus_nine))
    state = state.record_night(_entry(night)).with_model_key("optimizer=a;target=b")
    path = store.save(state)
    assert path == tmp_path / "state" / "projects" / project_key(project) / "state.json"

    on_disk = json.loads(path.read_text())
    assert on_disk["harvest_cursor"] in ("2026-11-25T02:30:00Z", "2026-11-25T02:30:00+00:00")
    again = store.load(project)
    assert again == state
    assert again.harvest_cursor == NOW and again.harvest_cursor.tzinfo is not None
    assert again.begin_night()[1] == 2
    assert again.model_key_changed("x") and not again.model_key_changed("optimizer=a;target=b")


def test_naive_cursor_is_utc(tmp_path: Path) -> None:
    state = StateStore(tmp_path).load(tmp_path).with_cursor(datetime(2026, 11, 25, 2, 30))
    assert state.harvest_cursor == NOW


def test_history_and_archive_are_capped(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "s")
    state = store.load(tmp_path)
    for n in range(1, HISTORY_CAP + 20):
        state = state.record_night(_entry(n))
    assert len(state.history) == HISTORY_CAP
    assert state.history[-1].night == HISTORY_CAP + 19

    tasks = [TaskRecord(id=f"t{i}", intent=f"task {i}") for i in range(ARCHIVE_CAP + 50)]
    state = state.archive_tasks(tasks)
    state = state.archive_tasks([TaskRecord(id="t5", intent="task 5 again")])
    state = state.archive_tasks([TaskRecord(id="secret", intent="x", split=Split.TEST)])
    assert len(state.task_archive) == ARCHIVE_CAP
    assert state.task_archive[-1]["intent"] == "task 5 again"
    assert all(t["id"] != "secret" for t in state.task_archive)
    store.save(state)
    restored = store.load(tmp_path).archived_tasks()
    assert restored[-1] == TaskRecord(id="t5", intent="task 5 again")


def test_archive_redacts_secrets(tmp_path: Path) -> None:
    key = "ghp_" + "A" * 36
    state = StateStore(tmp_path).load(tmp_path)
    state = state.archive_tasks([TaskRecord(id="t", intent=f"push with {key}")])
    assert key not in json.dumps(state.model_dump(mode="json"))


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "expected a JSON object"),
        (b'{"version": 2, "project": "/x"}', "version"),
        (b'{"version": 1, "project": "/x", "surprise": 1}', "surprise"),
        (b'{"version": 1, "project": "/x", "harvest_cursor": "2026-11-25T02:30:00"}', "cursor"),
        (b'{"version": 1, "project": "/x", "night": -1}', "night"),
        (b"\xff\xfe", "not valid JSON"),
    ],
)
def test_corrupt_state_raises_naming_the_file(tmp_path: Path, content: bytes, reason: str) -> None:
    store = StateStore(tmp_path / "s")
    path = store.path_for(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.raises(CorruptStateError) as info:
        store.load(tmp_path)
    assert str(path) in str(info.value)
    assert reason in str(info.value)
    assert path.read_bytes() == content  # never reset


def test_state_of_another_project_is_refused(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "s")
    path = store.path_for(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 1, "project": "/somewhere/else"}))
    with pytest.raises(CorruptStateError, match="belongs to project"):
        store.load(tmp_path)


def test_project_key_is_readable_stable_and_distinct(tmp_path: Path) -> None:
    a = tmp_path / "My Project!"
    b = tmp_path / "other" / "My Project!"
    a.mkdir()
    b.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(a)
    key = project_key(a)
    assert key.startswith("my-project-") and len(key.rsplit("-", 1)[1]) == 10
    assert project_key(a) == key == project_key(link)
    assert project_key(b) != key
    assert project_key("/").startswith("root-")


def test_a_projects_runs_live_under_its_key(tmp_path: Path) -> None:
    runs = runs_dir(tmp_path / "state", tmp_path)
    assert runs == tmp_path / "state" / "projects" / project_key(tmp_path) / "runs"


def test_recording_a_night_twice_keeps_one_entry_and_the_counter_ahead(tmp_path: Path) -> None:
    state = StateStore(tmp_path).load(tmp_path)
    state = state.record_night(_entry(1)).record_night(_entry(2))
    again = state.record_night(_entry(1).model_copy(update={"accepted": True}))
    assert [(e.night, e.accepted) for e in again.history] == [(1, True), (2, False)]
    assert again.night == 2 and state.record_night(_entry(7)).night == 7
