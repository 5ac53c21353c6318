"""Tasks file: draft write, review flag, strict validation naming task and check."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from skillopt.errors import DataError
from skillopt.types import ReferenceKind, RuleCheck, Split, TaskRecord
from skillopt_sleep.harvest import SourceKind, SourceSpec, harvest
from skillopt_sleep.mining.heuristic import heuristic_mine
from skillopt_sleep.mining.tasks_file import load_tasks_file, write_tasks_file
from support.transcripts import Turn, write_claude_session

NOW = datetime(2026, 11, 25, 1, 0, tzinfo=UTC)

TASKS = [
    TaskRecord(
        id="h_000000000001",
        intent="Summarise the changelog",
        reference_kind=ReferenceKind.RULE,
        checks=(RuleCheck(op="max_chars", arg=400), RuleCheck(op="contains", arg="2.0")),
    ),
    TaskRecord(id="h_000000000002", intent="Explain the retry policy", split=Split.VAL),
]


def _write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_draft_round_trip_is_unreviewed(tmp_path: Path) -> None:
    path = write_tasks_file(
        tmp_path / "tasks.json",
        TASKS,
        generated_at=NOW,
        metadata={"project": "/p", "n_sessions": 4},
    )
    data = json.loads(path.read_text())
    assert data["version"] == 1 and data["reviewed"] is False
    loaded = load_tasks_file(path)
    assert loaded.reviewed is False
    assert loaded.tasks == tuple(TASKS)
    assert loaded.generated_at == NOW
    assert loaded.metadata == {"project": "/p", "n_sessions": 4}


def test_reviewed_flag_is_read(tmp_path: Path) -> None:
    path = write_tasks_file(tmp_path / "t.json", TASKS, generated_at=NOW)
    data = json.loads(path.read_text())
    data["reviewed"] = True
    assert load_tasks_file(_write(path, data)).reviewed is True


def test_written_file_is_redacted(tmp_path: Path) -> None:
    key = "ghp_" + "Q" * 36
    path = write_tasks_file(
        tmp_path / "t.json", [TaskRecord(id="x", intent=f"push using {key}")], generated_at=NOW
    )
    assert key not in path.read_text()


def test_bare_list_is_an_unreviewed_draft(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.json", [{"id": "a", "intent": "Do the thing"}])
    loaded = load_tasks_file(path)
    assert loaded.reviewed is False and [t.id for t in loaded.tasks] == ["a"]


def test_legacy_task_shape_loads(tmp_path: Path) -> None:
    legacy = {
        "id": "task_abc",
        "intent": "Write the summary",
        "split": "holdout",
        "reference_kind": "rule",
        "judge": {"kind": "rule", "checks": [{"op": "max_chars", "arg": 100}]},
    }
    loaded = load_tasks_file(_write(tmp_path / "t.json", {"version": 1, "tasks": [legacy]}))
    assert loaded.tasks[0].split is Split.VAL
    assert loaded.tasks[0].checks == (RuleCheck(op="max_chars", arg=100),)


def _doc(*tasks: Any, **top: Any) -> dict[str, Any]:
    return {"version": 1, "reviewed": True, "tasks": list(tasks), **top}


RULE = {"reference_kind": "rule"}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            _doc({"id": "a", "intent": "x", **RULE, "checks": [{"op": "shout", "arg": "y"}]}),
            r"task #1 \('a'\): check #1 \(shout=y\): .*unknown op 'shout'",
        ),
        (
            _doc(
                {"id": "a", "intent": "x"},
                {
                    "id": "b",
                    "intent": "y",
                    **RULE,
                    "checks": [{"op": "contains", "arg": "k"}, {"op": "regex", "arg": "("}],
                },
            ),
            r"task #2 \('b'\): check #2 \(regex=\(\)",
        ),
        (
            _doc({"id": "a", "intent": "x", **RULE, "checks": [{"op": "max_chars", "arg": -3}]}),
            r"task #1 \('a'\): check #1 .*non-negative integer",
        ),
        (
            _doc({"id": "a", "intent": "x", **RULE, "checks": [{"op": "contains", "arg": " "}]}),
            r"needs a non-empty text arg",
        ),
        (_doc({"id": "a", "intent": "x", **RULE}), r"task #1 \('a'\): .*needs at least one check"),
        (_doc({"id": "a", "intent": "x", "colour": "red"}), r"task #1 \('a'\): .*colour"),
        (_doc({"intent": "no id"}), r"task #1: "),
        (_doc({"id": "a", "intent": "   "}), r"empty intent"),
        (_doc({"id": "a", "intent": "x"}, {"id": "a", "intent": "y"}), r"duplicate id 'a'"),
        (_doc({"id": "a", "intent": "x"}, reviewed="yes"), r"'reviewed' must be true or false"),
        (_doc(version=2), r"unsupported version 2"),
        (_doc(extra=1), r"unknown keys \['extra'\]"),
        (_doc(generated_at="soon"), r"'generated_at' is not a timestamp"),
        (_doc(n_sessions="4"), r"'n_sessions' must be a int"),
        ({"version": 1, "tasks": {"a": 1}}, r"'tasks' must be a list"),
        ("just a string", r"expected a JSON object"),
    ],
)
def test_invalid_files_raise_a_clear_data_error(
    tmp_path: Path, document: Any, message: str
) -> None:
    path = _write(tmp_path / "tasks.json", document)
    with pytest.raises(DataError, match=message) as info:
        load_tasks_file(path)
    assert str(path) in str(info.value)


def test_unparsable_and_missing_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1,\n "tasks": [}')
    with pytest.raises(DataError, match=r"not valid JSON \(line 2"):
        load_tasks_file(bad)
    with pytest.raises(DataError, match="no such tasks file"):
        load_tasks_file(tmp_path / "nope.json")


def test_shape_only_checks_warn_but_load(tmp_path: Path) -> None:
    task = {"id": "a", "intent": "x", **RULE, "checks": [{"op": "max_chars", "arg": 10}]}
    loaded = load_tasks_file(_write(tmp_path / "t.json", _doc(task)))
    assert loaded.warnings and "task #1 ('a')" in loaded.warnings[0]


def test_unsupported_metadata_is_refused_on_write(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="unsupported metadata"):
        write_tasks_file(tmp_path / "t.json", TASKS, generated_at=NOW, metadata={"who": "me"})


def test_harvest_mine_write_review_load(tmp_path: Path) -> None:
    """The `harvest --output` path: real transcripts -> draft -> user review -> load."""
    project = tmp_path / "proj"
    project.mkdir()
    for i, day in enumerate((20, 21, 22)):
        write_claude_session(
            tmp_path / "claude",
            cwd=project,
            start=datetime(2026, 11, day, 9, tzinfo=UTC),
            turns=[
                Turn(user="Write the standup summary from git log"),
                Turn(user="no, keep it under 500 characters" if i else "thanks"),
            ],
        )
    digests = harvest(
        [SourceSpec(kind=SourceKind.CLAUDE_CODE, home=tmp_path / "claude")],
        since=None,
        project=project,
        limit=10,
    ).digests
    mined = heuristic_mine(digests, project=str(project))
    path = write_tasks_file(
        tmp_path / "tasks.json", mined.tasks, generated_at=NOW, metadata={"n_sessions": 3}
    )
    draft = load_tasks_file(path)
    assert not draft.reviewed and len(draft.tasks) == 1
    (task,) = draft.tasks
    assert len(task.source_sessions) == 3
    assert task.checks == (RuleCheck(op="max_chars", arg=500),)
    data = json.loads(path.read_text())
    data["reviewed"] = True
    data["tasks"][0]["intent"] = "Write today's standup summary from the git log"
    reviewed = load_tasks_file(_write(path, data))
    assert reviewed.reviewed and reviewed.tasks[0].intent.startswith("Write today's")


def test_a_deeply_nested_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    path.write_text('{"version": 1, "tasks": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(DataError, match="nested too deeply"):
        load_tasks_file(path)


@pytest.mark.parametrize("field", ["intent", "context", "reference", "system_contract"])
def test_an_oversized_task_is_refused_naming_it(tmp_path: Path, field: str) -> None:
    task = {"id": "h_000000000009", "intent": "Fix it", field: "x" * 6_000_000}
    path = _write(tmp_path / "tasks.json", {"version": 1, "reviewed": True, "tasks": [task]})
    with pytest.raises(DataError, match=rf"'h_000000000009'.*{field} is 6,000,000 characters"):
        load_tasks_file(path)


def test_a_tasks_file_past_its_size_bound_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    with open(path, "wb") as handle:
        handle.truncate(65 * 1024 * 1024)  # sparse: no disk spent
    with pytest.raises(DataError, match="larger than 64 MiB"):
        load_tasks_file(path)
