"""Transactional adoption: pins, confinement, backups, receipts, rollback, recovery."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from skillopt.errors import CorruptStateError, LockHeldError, RefusedError
from skillopt_sleep.adopt import (
    JOURNAL_NAME,
    LOCK_NAME,
    AdoptionError,
    adopt,
    adopted_names,
    pending,
    recover,
)
from skillopt_sleep.adopt_journal import RecoveryAction
from skillopt_sleep.staging import Proposal, ProposalKind, sha256_file, write_proposal
from support.adoption import killed_adoption


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    roots = tmp_path / "skills"
    for name in ("alpha", "beta"):
        (roots / name).mkdir(parents=True)
        (roots / name / "SKILL.md").write_text(f"# {name}\noriginal\n")
    (roots / "gamma").mkdir()  # no live file yet
    run = tmp_path / "run"
    write_proposal(
        run,
        [
            Proposal(name=n, live_path=roots / n / "SKILL.md", text=f"# {n}\nimproved\n")
            for n in ("alpha", "beta", "gamma")
        ],
        run_id="r1",
    )
    return {"roots": roots, "run": run, "tmp": tmp_path}


def _live(world: dict[str, Path], name: str) -> Path:
    return world["roots"] / name / "SKILL.md"


def failing_replace(
    at: int, calls: list[str] | None = None, error: OSError | None = None
) -> Callable[[str, str], None]:
    """An ``os.replace`` that fails on call number ``at`` (recording each target)."""
    seen = [] if calls is None else calls

    def replace(src: str, dst: str) -> None:
        seen.append(dst)
        if len(seen) == at:
            raise error or OSError("boom")
        os.replace(src, dst)

    return replace


def test_adopt_everything(world: dict[str, Path]) -> None:
    before = _live(world, "alpha").read_bytes()
    result = adopt(world["run"], skill_roots=[world["roots"]])
    assert [a.name for a in result.adopted] == ["alpha", "beta", "gamma"]
    for name in ("alpha", "beta", "gamma"):
        assert _live(world, name).read_text() == f"# {name}\nimproved\n"
    alpha = result.adopted[0]
    backup = Path(alpha.backup_path)
    assert backup.read_bytes() == before and backup.stat().st_mode & 0o222 == 0
    assert result.adopted[2].backup_path == "" and result.adopted[2].sha256_before == ""
    receipts = [json.loads(x) for x in (world["run"] / "adoptions.jsonl").read_text().splitlines()]
    assert [r["name"] for r in receipts] == ["alpha", "beta", "gamma"]
    assert {r["transaction"] for r in receipts} == {result.transaction}
    assert receipts[0]["sha256_after"] == sha256_file(_live(world, "alpha"))
    assert not (world["run"] / JOURNAL_NAME).exists()
    with pytest.raises(RefusedError, match="nothing left"):
        adopt(world["run"], skill_roots=[world["roots"]])


def test_subset_then_rest_and_no_readoption(world: dict[str, Path]) -> None:
    assert [e.name for e in pending(world["run"])] == ["alpha", "beta", "gamma"]
    first = adopt(world["run"], skill_roots=[world["roots"]], select=["beta"])
    assert first.to_dict()["adopted"][0]["name"] == "beta"
    assert _live(world, "alpha").read_text() == "# alpha\noriginal\n"
    assert adopted_names(world["run"]) == {"beta"}
    assert [e.name for e in pending(world["run"])] == ["alpha", "gamma"]
    with pytest.raises(RefusedError, match=r"already adopted.*beta"):
        adopt(world["run"], skill_roots=[world["roots"]], select=["beta"])
    rest = adopt(world["run"], skill_roots=[world["roots"]])
    assert [a.name for a in rest.adopted] == ["alpha", "gamma"]


@pytest.mark.parametrize(
    ("select", "message"),
    [
        (["nope"], "not in this night's proposal"),
        (["alpha", "alpha"], "duplicate"),
        ([], "no proposal"),
    ],
)
def test_bad_selection(world: dict[str, Path], select: list[str], message: str) -> None:
    with pytest.raises(RefusedError, match=message):
        adopt(world["run"], skill_roots=[world["roots"]], select=select)


def test_live_file_changed_since_staging_refuses_and_touches_nothing(
    world: dict[str, Path],
) -> None:
    _live(world, "beta").write_text("user edit\n")
    with pytest.raises(RefusedError, match="changed since staging"):
        adopt(world["run"], skill_roots=[world["roots"]])
    assert _live(world, "alpha").read_text() == "# alpha\noriginal\n"
    assert _live(world, "beta").read_text() == "user edit\n"
    assert not (world["run"] / "adoptions.jsonl").exists()


def test_file_created_where_none_was_staged_refuses(world: dict[str, Path]) -> None:
    _live(world, "gamma").write_text("appeared\n")
    with pytest.raises(RefusedError, match="gamma"):
        adopt(world["run"], skill_roots=[world["roots"]], select=["gamma"])


def test_target_outside_skill_roots_is_refused(world: dict[str, Path]) -> None:
    other = world["tmp"] / "elsewhere"
    other.mkdir()
    with pytest.raises(RefusedError, match="outside the configured skill roots"):
        adopt(world["run"], skill_roots=[other])
    with pytest.raises(RefusedError, match="no skill roots"):
        adopt(world["run"], skill_roots=[])


def test_symlink_escapes_are_refused(tmp_path: Path) -> None:
    roots = tmp_path / "skills"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "SKILL.md").write_text("secret\n")
    roots.mkdir()
    (roots / "linked").symlink_to(outside, target_is_directory=True)
    (roots / "filelink").mkdir()
    (roots / "filelink" / "SKILL.md").symlink_to(outside / "SKILL.md")
    for name in ("linked", "filelink"):
        run = tmp_path / f"run-{name}"
        live = roots / name / "SKILL.md"
        write_proposal(run, [Proposal(name=name, live_path=live, text="x")])
        with pytest.raises(RefusedError, match="outside the configured skill roots"):
            adopt(run, skill_roots=[roots])
    assert (outside / "SKILL.md").read_text() == "secret\n"


def test_symlink_inside_the_root_is_refused(tmp_path: Path) -> None:
    roots = tmp_path / "skills"
    (roots / "a").mkdir(parents=True)
    (roots / "a" / "real.md").write_text("r")
    (roots / "a" / "SKILL.md").symlink_to(roots / "a" / "real.md")
    run = tmp_path / "run"
    live = roots / "a" / "SKILL.md"
    write_proposal(run, [Proposal(name="a", live_path=live, text="x")])
    # The pinned realpath is real.md; writing through the link is refused either way.
    with pytest.raises(RefusedError, match=r"symlink|resolves"):
        adopt(run, skill_roots=[roots])


def test_hard_linked_live_file_is_refused(world: dict[str, Path]) -> None:
    os.link(_live(world, "alpha"), world["tmp"] / "hardlink.md")
    with pytest.raises(RefusedError, match="hard links"):
        adopt(world["run"], skill_roots=[world["roots"]], select=["alpha"])


def test_failure_on_second_replace_rolls_everything_back(world: dict[str, Path]) -> None:
    before = {n: _live(world, n).read_bytes() for n in ("alpha", "beta")}
    calls: list[str] = []
    flaky_replace = failing_replace(2, calls, OSError(28, "No space left on device"))
    with pytest.raises(AdoptionError, match="rolled back"):
        adopt(world["run"], skill_roots=[world["roots"]], replace_fn=flaky_replace)
    assert len(calls) == 2
    for name, data in before.items():
        assert _live(world, name).read_bytes() == data
    assert not _live(world, "gamma").exists()
    assert not (world["run"] / "adoptions.jsonl").exists()
    assert not (world["run"] / JOURNAL_NAME).exists()
    assert [p.name for p in _live(world, "alpha").parent.iterdir()] == ["SKILL.md"]
    # After the failure the same proposal can still be adopted.
    adopt(world["run"], skill_roots=[world["roots"]])
    assert _live(world, "beta").read_text() == "# beta\nimproved\n"


def test_rollback_removes_a_file_that_did_not_exist(world: dict[str, Path]) -> None:
    with pytest.raises(AdoptionError):
        adopt(
            world["run"],
            skill_roots=[world["roots"]],
            select=["gamma", "alpha"],
            replace_fn=failing_replace(2),
        )
    assert not _live(world, "gamma").exists()


def _kill_mid_adoption(world: dict[str, Path]) -> None:
    """A real process dies between the first and second replace."""
    killed_adoption(world["run"], [world["roots"]], die_at=2)
    assert _live(world, "alpha").read_text() == "# alpha\nimproved\n"  # half-adopted on disk
    assert (world["run"] / JOURNAL_NAME).exists()
    assert _temps(world["roots"])  # the second file's temp was never cleaned up


def _temps(root: Path) -> list[Path]:
    return sorted(root.rglob(".tmp-*"))


def test_killed_adoption_is_rolled_back_by_the_next_adopt(world: dict[str, Path]) -> None:
    _kill_mid_adoption(world)
    result = adopt(world["run"], skill_roots=[world["roots"]], select=["beta"])
    assert result.recovered is not None
    assert result.recovered.action is RecoveryAction.ROLLED_BACK
    assert result.recovered.files == (str(_live(world, "alpha")),)
    assert _live(world, "alpha").read_text() == "# alpha\noriginal\n"
    assert _live(world, "beta").read_text() == "# beta\nimproved\n"
    assert recover(world["run"]) is None
    assert _temps(world["roots"]) == []


def test_killed_adoption_is_rolled_back_on_its_own(world: dict[str, Path]) -> None:
    _kill_mid_adoption(world)
    recovery = recover(world["run"])
    assert recovery is not None and recovery.action is RecoveryAction.ROLLED_BACK
    assert recovery.files == (str(_live(world, "alpha")),)
    assert "rolled back" in recovery.describe() and "alpha" in recovery.describe()
    assert _live(world, "alpha").read_text() == "# alpha\noriginal\n"
    assert not (world["run"] / JOURNAL_NAME).exists()
    assert _temps(world["roots"]) == []
    assert adopted_names(world["run"]) == set()


def test_a_kill_after_the_last_replacement_is_completed(world: dict[str, Path]) -> None:
    killed_adoption(world["run"], [world["roots"]], die_at=3, replaced=True)
    assert (world["run"] / JOURNAL_NAME).exists() and adopted_names(world["run"]) == set()
    recovery = recover(world["run"])
    assert recovery is not None and recovery.action is RecoveryAction.COMPLETED
    assert "completed" in recovery.describe()
    assert adopted_names(world["run"]) == {"alpha", "beta", "gamma"}
    assert pending(world["run"]) == []
    for name in ("alpha", "beta", "gamma"):
        assert _live(world, name).read_text() == f"# {name}\nimproved\n"
    assert not (world["run"] / JOURNAL_NAME).exists()
    receipts = (world["run"] / "adoptions.jsonl").read_text().splitlines()
    assert [json.loads(r)["sha256_after"] for r in receipts] == [
        sha256_file(_live(world, n)) for n in ("alpha", "beta", "gamma")
    ]


def test_a_finished_journal_left_behind_is_removed(world: dict[str, Path]) -> None:
    copy = world["tmp"] / "journal-copy.json"

    def keep_journal(src: str, dst: str) -> None:
        shutil.copyfile(world["run"] / JOURNAL_NAME, copy)
        os.replace(src, dst)

    adopt(world["run"], skill_roots=[world["roots"]], replace_fn=keep_journal)
    shutil.copyfile(copy, world["run"] / JOURNAL_NAME)  # as if killed before its removal
    recovery = recover(world["run"])
    assert recovery is not None and recovery.action is RecoveryAction.COMPLETED
    assert not (world["run"] / JOURNAL_NAME).exists()
    assert len((world["run"] / "adoptions.jsonl").read_text().splitlines()) == 3


def test_a_killed_adoption_that_created_a_folder_removes_it(tmp_path: Path) -> None:
    roots = tmp_path / "skills"
    project = tmp_path / "proj"
    project.mkdir()
    (project / "CLAUDE.md").write_text("mem\n")
    run = tmp_path / "run"
    write_proposal(
        run,
        [
            Proposal(name="learned", live_path=roots / "learned" / "SKILL.md", text="new\n"),
            Proposal(
                name="CLAUDE",
                live_path=project / "CLAUDE.md",
                text="mem2\n",
                kind=ProposalKind.MEMORY,
            ),
        ],
    )
    killed_adoption(run, [roots, project], die_at=2)
    assert (roots / "learned" / "SKILL.md").read_text() == "new\n"
    recovery = recover(run)
    assert recovery is not None and recovery.action is RecoveryAction.ROLLED_BACK
    assert not (roots / "learned").exists() and (project / "CLAUDE.md").read_text() == "mem\n"
    assert _temps(project) == []


def test_lock_held_by_a_live_process(world: dict[str, Path]) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(world['run'] / LOCK_NAME)!r}, os.O_CREAT | os.O_RDWR)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        with pytest.raises(LockHeldError):
            adopt(world["run"], skill_roots=[world["roots"]])
        assert _live(world, "alpha").read_text() == "# alpha\noriginal\n"
    finally:
        holder.communicate(timeout=10)
    adopt(world["run"], skill_roots=[world["roots"]])  # released with the holder


def test_tampered_proposal_is_refused(world: dict[str, Path]) -> None:
    (world["run"] / "proposal" / "skill-alpha.md").write_text("# alpha\nsneaky\n")
    with pytest.raises(CorruptStateError, match="does not match its sha256 pin"):
        adopt(world["run"], skill_roots=[world["roots"]], select=["alpha"])
    assert _live(world, "alpha").read_text() == "# alpha\noriginal\n"


def test_memory_file_confined_to_project_root(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    memory = project / "CLAUDE.md"
    memory.write_text("mem\n")
    run = tmp_path / "run"
    write_proposal(
        run, [Proposal(name="memory", live_path=memory, text="mem2\n", kind=ProposalKind.MEMORY)]
    )
    result = adopt(run, skill_roots=[project])
    assert memory.read_text() == "mem2\n" and result.adopted[0].kind == "memory"


def _stage_new(tmp_path: Path, live: Path, name: str = "learned") -> Path:
    run = tmp_path / f"run-{name}"
    write_proposal(run, [Proposal(name=name, live_path=live, text="---\nname: x\n---\nnew\n")])
    return run


@pytest.mark.parametrize("root_exists", [True, False])
def test_adopt_creates_a_missing_skill_folder_inside_the_roots(
    tmp_path: Path, root_exists: bool
) -> None:
    roots = tmp_path / "skills"
    if root_exists:
        roots.mkdir()
    project = tmp_path / "proj"
    project.mkdir()
    live = roots / "learned" / "SKILL.md"
    run = tmp_path / "run"
    write_proposal(
        run,
        [
            Proposal(name="learned", live_path=live, text="---\nname: learned\n---\nnew\n"),
            Proposal(
                name="memory",
                live_path=project / "CLAUDE.md",
                text="mem\n",
                kind=ProposalKind.MEMORY,
            ),
        ],
    )
    result = adopt(run, skill_roots=[roots, project])
    assert [a.name for a in result.adopted] == ["learned", "memory"]
    assert live.read_text() == "---\nname: learned\n---\nnew\n"
    assert (project / "CLAUDE.md").read_text() == "mem\n"
    assert live.parent.stat().st_mode & 0o777 == 0o755


def test_a_missing_folder_outside_the_roots_is_not_created(tmp_path: Path) -> None:
    roots = tmp_path / "home" / ".claude" / "skills"  # ~/.claude itself is missing
    run = _stage_new(tmp_path, roots / "learned" / "SKILL.md")
    with pytest.raises(RefusedError, match=r"does not exist and is outside.*skill_roots"):
        adopt(run, skill_roots=[roots])
    assert not (tmp_path / "home").exists()


def test_a_missing_folder_is_never_created_through_a_symlink(tmp_path: Path) -> None:
    roots = tmp_path / "skills"
    roots.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (roots / "linked").symlink_to(outside, target_is_directory=True)
    run = _stage_new(tmp_path, roots / "linked" / "learned" / "SKILL.md")
    with pytest.raises(RefusedError, match="outside the configured skill roots"):
        adopt(run, skill_roots=[roots])
    # A symlink planted after staging where the folder will be created is refused too.
    run = _stage_new(tmp_path, roots / "late" / "SKILL.md", name="late")
    (roots / "late").symlink_to(outside, target_is_directory=True)
    with pytest.raises(RefusedError, match=r"resolves to|outside"):
        adopt(run, skill_roots=[roots])
    assert list(outside.iterdir()) == []


def test_rollback_removes_a_folder_it_created(world: dict[str, Path]) -> None:
    live = world["roots"] / "delta" / "SKILL.md"
    run = world["tmp"] / "run-delta"
    write_proposal(
        run,
        [
            Proposal(name="delta", live_path=live, text="new\n"),
            Proposal(name="alpha", live_path=_live(world, "alpha"), text="changed\n"),
        ],
    )
    with pytest.raises(AdoptionError, match="rolled back"):
        adopt(run, skill_roots=[world["roots"]], replace_fn=failing_replace(2))
    assert not live.parent.exists()
    assert _live(world, "alpha").read_text() == "# alpha\noriginal\n"
