"""Skill store versions and the proposal writer (pins, manifest last, refusals)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from skillopt.errors import CorruptStateError, DataError, RefusedError
from skillopt_sleep.staging import (
    MANIFEST_NAME,
    Proposal,
    ProposalKind,
    SkillStore,
    load_manifest,
    read_pinned,
    scaffold_skill,
    sha256_bytes,
    sha256_file,
    skill_description,
    write_proposal,
)

NOW = datetime(2026, 11, 25, 3, 0, tzinfo=UTC)


def test_versions_are_numbered_immutable_and_linked(tmp_path: Path) -> None:
    store = SkillStore(tmp_path / "proj")
    v1 = store.add_version("writer", "# Writer\nv1\n", run_id="r1", night=1, created_at=NOW)
    v2 = store.add_version("writer", "# Writer\nv2\n", run_id="r2", night=2, created_at=NOW)
    assert (v1.number, v1.parent, v1.file) == (1, None, "v0001.md")
    assert (v2.number, v2.parent, v2.run_id, v2.night) == (2, 1, "r2", 2)
    assert store.read("writer", 1) == "# Writer\nv1\n"
    assert store.latest("writer") == v2
    path = tmp_path / "proj" / "skills" / "writer" / "versions" / "v0001.md"
    assert not os.access(path, os.W_OK) or os.geteuid() == 0
    assert path.stat().st_mode & 0o222 == 0  # read-only
    index = json.loads((path.parent.parent / "index.json").read_text())
    assert [v["sha256"] for v in index["versions"]] == [v1.sha256, v2.sha256]


def test_same_text_is_not_stored_twice(tmp_path: Path) -> None:
    store = SkillStore(tmp_path)
    a = store.add_version("s", "same", run_id="r1", night=1)
    b = store.add_version("s", "same", run_id="r1", night=1)
    assert a == b and len(store.versions("s")) == 1


def test_orphan_version_file_from_a_killed_writer(tmp_path: Path) -> None:
    store = SkillStore(tmp_path)
    store.add_version("s", "one", run_id="r1", night=1)
    versions = tmp_path / "skills" / "s" / "versions"
    (versions / "v0002.md").write_text("two")  # written, index never updated
    v = store.add_version("s", "two", run_id="r2", night=2)
    assert v.number == 2 and store.read("s", 2) == "two"
    (versions / "v0003.md").write_text("garbage")
    v4 = store.add_version("s", "four", run_id="r3", night=3)
    assert v4.number == 4 and v4.parent == 2


def test_tampered_version_is_detected(tmp_path: Path) -> None:
    store = SkillStore(tmp_path)
    store.add_version("s", "one", run_id="r1", night=1)
    path = tmp_path / "skills" / "s" / "versions" / "v0001.md"
    path.chmod(0o644)
    path.write_text("evil")
    with pytest.raises(CorruptStateError, match="does not match its sha256 pin"):
        store.read("s", 1)


def test_read_pinned_returns_the_pinned_bytes_and_refuses_any_other(tmp_path: Path) -> None:
    path = tmp_path / "pinned.md"
    path.write_bytes(b"kept\n")
    pin = sha256_bytes(b"kept\n")
    assert read_pinned(path, pin) == b"kept\n"
    path.write_bytes(b"changed\n")
    with pytest.raises(CorruptStateError, match="does not match its sha256 pin"):
        read_pinned(path, pin)
    path.unlink()
    with pytest.raises(CorruptStateError, match="unreadable"):
        read_pinned(path, pin)


def test_corrupt_index_and_bad_names(tmp_path: Path) -> None:
    store = SkillStore(tmp_path)
    (tmp_path / "skills" / "s").mkdir(parents=True)
    (tmp_path / "skills" / "s" / "index.json").write_text("{oops")
    with pytest.raises(CorruptStateError, match=r"index\.json"):
        store.versions("s")
    for bad in ("../x", "a/b", "", ".hidden", "x..y", "trailing."):
        with pytest.raises(DataError, match="invalid skill name"):
            store.add_version(bad, "t", run_id="r", night=1)


def test_store_keeps_the_staged_bytes(tmp_path: Path) -> None:
    """The store holds what was staged: the user's own lines (a key included) as they are
    in the live file; redacting them would make adopt overwrite the user's text."""
    key = "sk-proj-" + "x1Y2" * 8
    store = SkillStore(tmp_path)
    store.add_version("s", f"use {key}", run_id="r", night=1)
    assert store.read("s", 1) == f"use {key}"


def _live(tmp_path: Path, name: str, text: str | None) -> Path:
    path = tmp_path / "skills" / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    if text is not None:
        path.write_text(text)
    return path


def test_write_proposal_pins_live_and_proposed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    a = _live(tmp_path, "a", "old a\n")
    b = _live(tmp_path, "b", None)
    mem = tmp_path / "CLAUDE.md"
    manifest = write_proposal(
        run,
        [
            Proposal(name="a", live_path=a, text="new a\n", live_sha256=sha256_file(a)),
            Proposal(name="b", live_path=b, text="new b\n", live_sha256=""),
            Proposal(name="memory", live_path=mem, text="mem\n", kind=ProposalKind.MEMORY),
        ],
        run_id="r1",
        now=NOW,
    )
    assert [e.name for e in manifest.entries] == ["a", "b", "memory"]
    ea, eb, em = manifest.entries
    assert ea.live_sha256 == sha256_file(a) and eb.live_sha256 == "" and em.live_sha256 == ""
    assert (run / ea.proposed_file).read_text() == "new a\n"
    assert ea.sha256 == sha256_file(run / ea.proposed_file)
    assert em.proposed_file == "proposal/memory-memory.md"
    assert ea.live_realpath == os.path.realpath(a)
    on_disk = json.loads((run / "proposal" / MANIFEST_NAME).read_text())
    assert on_disk["schema"] == "skillopt.proposal" and on_disk["run_id"] == "r1"
    assert load_manifest(run) == manifest


def test_manifest_is_written_last(tmp_path: Path) -> None:
    run = tmp_path / "run"
    a = _live(tmp_path, "a", "x")
    write_proposal(run, [Proposal(name="a", live_path=a, text="y")])
    files = sorted((run / "proposal").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    assert files[-1].name == MANIFEST_NAME


def test_live_file_changed_during_the_night_refuses(tmp_path: Path) -> None:
    a = _live(tmp_path, "a", "baseline")
    pin = sha256_file(a)
    a.write_text("edited by the user meanwhile")
    with pytest.raises(RefusedError, match="changed while the night ran"):
        write_proposal(
            tmp_path / "run", [Proposal(name="a", live_path=a, text="new", live_sha256=pin)]
        )
    assert not (tmp_path / "run" / "proposal" / MANIFEST_NAME).exists()


@pytest.mark.parametrize(
    ("proposals", "message"),
    [
        ([Proposal(name="a", live_path=Path("rel/SKILL.md"), text="x")], "must be absolute"),
        ([Proposal(name="../a", live_path=Path("/x/SKILL.md"), text="x")], "invalid skill name"),
        (
            [
                Proposal(name="a", live_path=Path("/x/a/SKILL.md"), text="x"),
                Proposal(name="A", live_path=Path("/x/b/SKILL.md"), text="x"),
            ],
            "two proposals are named",
        ),
        (
            [
                Proposal(name="a", live_path=Path("/x/a/SKILL.md"), text="x"),
                Proposal(name="b", live_path=Path("/x/a/SKILL.md"), text="x"),
            ],
            "two proposals target",
        ),
    ],
)
def test_bad_proposals_are_refused(tmp_path: Path, proposals: list[Proposal], message: str) -> None:
    with pytest.raises(DataError, match=message):
        write_proposal(tmp_path / "run", proposals)


def test_restaging_after_adoption_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    a = _live(tmp_path, "a", "x")
    write_proposal(run, [Proposal(name="a", live_path=a, text="y")])
    (run / "adoptions.jsonl").write_text("{}\n")
    with pytest.raises(RefusedError, match="already"):
        write_proposal(run, [Proposal(name="a", live_path=a, text="z")])


def test_load_manifest_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no published proposal"):
        load_manifest(tmp_path)
    (tmp_path / "proposal").mkdir()
    (tmp_path / "proposal" / MANIFEST_NAME).write_text('{"schema": "other"}')
    with pytest.raises(CorruptStateError, match="invalid manifest"):
        load_manifest(tmp_path)


def test_a_staged_skill_carries_front_matter_naming_the_project(tmp_path: Path) -> None:
    project = tmp_path / "billing-service"
    learned = "<!-- SKILLOPT:LEARNED START -->\n- a rule\n<!-- SKILLOPT:LEARNED END -->\n"
    text = scaffold_skill(learned, name="skillopt-sleep-learned", project=project)
    head, body = text.split("---\n\n", 1)
    assert head.splitlines()[1:] == [
        "name: skillopt-sleep-learned",
        f"description: {skill_description(project)}",
    ]
    assert body == learned and "billing-service" in skill_description(project)
    own = "---\nname: mine\ndescription: my words\n---\n" + learned
    assert scaffold_skill(own, name="skillopt-sleep-learned", project=project) == own
