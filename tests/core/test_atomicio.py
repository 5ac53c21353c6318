from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from skillopt.atomicio import (
    append_jsonl,
    atomic_create_bytes,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    dumps_json,
    dumps_json_list,
    read_jsonl,
    sweep_temp_files,
)


def test_atomic_write_replaces_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "f.txt"
    atomic_write_text(target, "first")
    atomic_write_text(target, "second")
    assert target.read_text() == "second"
    assert [p.name for p in target.parent.iterdir()] == ["f.txt"]


def test_atomic_write_json_rejects_nan_and_leaves_old_content(tmp_path: Path) -> None:
    target = tmp_path / "d.json"
    atomic_write_json(target, {"a": 1})
    with pytest.raises(ValueError):
        atomic_write_json(target, {"a": float("nan")})
    assert json.loads(target.read_text()) == {"a": 1}
    assert sweep_temp_files(tmp_path) == 0


def test_read_jsonl_drops_torn_last_line(tmp_path: Path) -> None:
    target = tmp_path / "r.jsonl"
    append_jsonl(target, [{"i": 1}, {"i": 2}])
    with open(target, "ab") as handle:
        handle.write(b'{"i": 3')  # a writer killed mid-line
    assert read_jsonl(target) == [{"i": 1}, {"i": 2}]


@pytest.mark.parametrize(
    "torn",
    [b'{"i": 3', b'{"i": 3, "pad": "' + b"x" * 70_000],  # short, and longer than one read
)
def test_append_after_a_torn_line_keeps_the_file_readable(tmp_path: Path, torn: bytes) -> None:
    target = tmp_path / "r.jsonl"
    append_jsonl(target, [{"i": 1}, {"i": 2}])
    with open(target, "ab") as handle:
        handle.write(torn)  # a writer killed mid-line
    append_jsonl(target, [{"i": 4}])
    assert read_jsonl(target) == [{"i": 1}, {"i": 2}, {"i": 4}]


def test_append_to_a_file_that_is_one_torn_line(tmp_path: Path) -> None:
    target = tmp_path / "r.jsonl"
    target.write_bytes(b'{"half": ')
    append_jsonl(target, [{"i": 1}])
    assert target.read_bytes() == b'{"i": 1}\n'


def test_sweep_removes_stray_temp_files(tmp_path: Path) -> None:
    (tmp_path / ".tmp-abc").write_text("half")
    (tmp_path / "keep").write_text("x")
    assert sweep_temp_files(tmp_path) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["keep"]


def test_a_list_built_from_its_items_texts_is_what_dumps_json_writes() -> None:
    items: list[object] = [
        {"b": [1, 2.5, {"deep": ["x\ny", "é", "\u2028"]}], "a": None, "empty": {}, "none": []},
        [],
        "line one\nline two",
        7,
        {"nested": {"lists": [[], [[]], [{"k": True}]]}},
    ]
    assert dumps_json_list(dumps_json(item) for item in items) == dumps_json(items)
    assert dumps_json_list([]) == dumps_json([])


def test_mode_none_keeps_the_replaced_files_permissions(tmp_path: Path) -> None:
    target = tmp_path / "live.md"
    target.write_text("old")
    target.chmod(0o600)
    atomic_write_bytes(target, b"new", mode=None)
    assert (target.read_bytes(), target.stat().st_mode & 0o777) == (b"new", 0o600)
    fresh = tmp_path / "fresh.md"
    atomic_write_bytes(fresh, b"x", mode=None)
    assert fresh.stat().st_mode & 0o777 == 0o644


def test_a_failing_rename_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "live.md"
    target.write_text("old")
    seen: list[str] = []

    def refuse(src: str, dst: str) -> None:
        seen.append(Path(src).name)
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        atomic_write_bytes(target, b"new", temp_prefix=".tmp-tx1-", replace=refuse)
    assert seen[0].startswith(".tmp-tx1-")
    assert [p.name for p in tmp_path.iterdir()] == ["live.md"]
    assert target.read_text() == "old"


def test_create_never_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "versions" / "v0001.md"
    assert atomic_create_bytes(target, b"first", mode=0o444)
    assert not atomic_create_bytes(target, b"second", mode=0o444)
    assert target.read_bytes() == b"first"
    assert target.stat().st_mode & 0o777 == 0o444
    assert os.listdir(target.parent) == ["v0001.md"]
