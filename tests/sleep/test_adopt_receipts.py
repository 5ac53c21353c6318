"""Adoption receipts are files on disk, not trusted input: a damaged ``adoptions.jsonl`` is
named (with what to do) and never stops `status` or a night; a receipt's backup is read
only from the run's own backups and only when it holds the hash the receipt promises."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from skillopt_sleep.adopt import adopt, adopted_names
from skillopt_sleep.adopt_journal import read_backup, receipts
from skillopt_sleep.cli import main
from skillopt_sleep.html.docdiff import proposal_diffs
from skillopt_sleep.staging import RECEIPTS_NAME, Proposal, write_proposal

SECRET = "the user's private notes, never to be shown"


@pytest.fixture
def adopted(tmp_path: Path) -> Path:
    """A night whose one proposal (an edit of an existing SKILL.md) was adopted."""
    project = tmp_path / "project"
    skill = project / ".claude" / "skills" / "notes" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("# notes\noriginal line\n")
    run = tmp_path / "run"
    write_proposal(run, [Proposal(name="notes", live_path=skill, text="# notes\nimproved\n",
                                  fanout=True)], run_id="r1")  # fmt: skip
    adopt(run, skill_roots=[project])
    return run


def _rewrite_receipt(run: Path, **changes: str) -> None:
    path = run / RECEIPTS_NAME
    (row,) = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text(json.dumps({**row, **changes}) + "\n")


def test_garbage_lines_are_skipped_and_named_with_what_to_do(adopted: Path) -> None:
    path = adopted / RECEIPTS_NAME
    path.write_bytes(b"garbage{{{\n" + path.read_bytes() + b'[1, 2]\n{"live_path": 3}\n\xff\xfe\n')
    with capture_logs() as logs:
        assert adopted_names(adopted) == {"notes"}
    (warning,) = [e for e in logs if e["event"] == "adopt.receipts_damaged"]
    assert warning["path"] == str(path) and warning["bad_count"] == 4
    assert "move it aside" in warning["hint"] and str(path) in warning["hint"]


def test_a_receipt_pointing_outside_the_run_is_never_read(adopted: Path, tmp_path: Path) -> None:
    outside = tmp_path / "private.md"
    outside.write_text(SECRET)
    digest = hashlib.sha256(outside.read_bytes()).hexdigest()
    _rewrite_receipt(adopted, backup_path=str(outside), sha256_before=digest)
    (receipt,) = receipts(adopted)
    assert read_backup(adopted, receipt) is None
    (diff,) = proposal_diffs(adopted)
    assert SECRET not in json.dumps([line.text for line in diff.lines])
    assert "does not match" in diff.compared_with


def test_a_backup_that_changed_since_the_receipt_is_not_used(adopted: Path) -> None:
    (receipt,) = receipts(adopted)
    assert read_backup(adopted, receipt) == b"# notes\noriginal line\n"
    backup = Path(receipt["backup_path"])
    backup.chmod(0o644)
    backup.write_text("# notes\nsomething else\n")
    assert read_backup(adopted, receipt) is None
    (diff,) = proposal_diffs(adopted)
    assert "something else" not in json.dumps([line.text for line in diff.lines])


def test_status_copes_with_a_garbage_receipts_file(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    assert main(["once", "--demo", "--state-dir", str(state), "--json"]) == 0
    (run,) = state.glob("projects/*/runs/*")
    (run / RECEIPTS_NAME).write_text("garbage{{{\nmore garbage\n")
    capfd.readouterr()
    demo = state / "demo"
    code = main(["status", "--json", "--project", str(demo / "demo-project"),
                 "--config", str(demo / "sleep.toml")])  # fmt: skip
    captured = capfd.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["recent"]
    named = [line for line in captured.err.splitlines() if "adopt.receipts_damaged" in line]
    assert len(named) == 1 and "move it aside" in named[0] and str(run) in named[0]
