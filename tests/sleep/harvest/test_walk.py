"""The transcript walk survives what a user's home throws at it (issue 24, item 2): folders that
vanish mid-walk, a folder it may not read (counted and reported, never silently skipped), symlink
loops and a sessions folder that is really ``/``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import skillopt_sleep
from skillopt_sleep.harvest import SourceKind, SourceSpec, claude_code, codex, harvest
from skillopt_sleep.harvest.refs import SessionRef, Unreadable
from support.permissions import drop_file_override
from support.transcripts import Turn, write_claude_session, write_codex_session

_START = datetime(2026, 1, 1, 9, tzinfo=UTC)
_SRC = Path(skillopt_sleep.__file__).resolve().parents[1]  # the code under test


def _codex_days(home: Path, project: Path, days: int) -> None:
    for day in range(days):
        write_codex_session(
            home,
            cwd=project,
            turns=[Turn(user=f"fix bug {day}")],
            start=_START + timedelta(days=day),
        )


def test_a_folder_removed_while_the_walk_runs_is_skipped(tmp_path: Path) -> None:
    home, project = tmp_path / "codex", tmp_path / "proj"
    project.mkdir()
    _codex_days(home, project, 6)
    listing = codex.list_sessions(home, None, ExitStack())
    first = next(listing)
    assert isinstance(first, SessionRef)
    for day in sorted((home / "sessions" / "2026" / "01").iterdir())[1:]:
        shutil.rmtree(day)  # the agent cleans up while we walk
    rest = list(listing)
    assert all(isinstance(item, SessionRef) for item in rest)


def test_a_symlink_loop_below_the_sessions_is_walked_once(tmp_path: Path) -> None:
    home, project = tmp_path / "codex", tmp_path / "proj"
    project.mkdir()
    _codex_days(home, project, 2)
    (home / "sessions" / "2026" / "loop").symlink_to(home / "sessions")
    (home / "archived_sessions").symlink_to(home)  # a loop through the root itself
    result = harvest(
        [SourceSpec(kind=SourceKind.CODEX, home=home)], since=None, project=project, limit=10
    )
    assert len(result.digests) == 2
    assert result.diagnostics.problems == ()


def test_a_sessions_folder_that_is_the_root_of_the_disk_costs_a_bounded_walk(
    tmp_path: Path,
) -> None:
    home = tmp_path / "codex"
    home.mkdir()
    (home / "sessions").symlink_to("/")
    found = list(codex.session_files(home))
    cut = [item for item in found if isinstance(item, Unreadable)]
    assert cut, "a walk of the whole disk says it stopped"
    assert all(item.reason for item in cut)


def _harvest_as_nobody(claude_home: Path, project: Path) -> dict[str, object]:
    """Harvest in a child where permissions hold (root ignores them)."""
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from skillopt_sleep.harvest import SourceKind, SourceSpec, harvest\n"
        "r = harvest([SourceSpec(kind=SourceKind.CLAUDE_CODE, home=Path(sys.argv[1]))],"
        " since=None, project=Path(sys.argv[2]), limit=100)\n"
        "print(json.dumps({'n': len(r.digests), **r.diagnostics.to_dict()}))\n"
    )

    env = {**os.environ, "PYTHONPATH": str(_SRC)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(claude_home), str(project)],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=drop_file_override,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_an_unreadable_projects_folder_is_counted_and_reported(tmp_path: Path) -> None:
    home, project = tmp_path / "claude", tmp_path / "proj"
    project.mkdir()
    for n in range(3):
        write_claude_session(home, cwd=project, turns=[Turn(user=f"task {n}")], start=_START)
    home.chmod(0o755)
    projects = home / "projects"
    projects.chmod(0o311)  # may be entered but not listed
    try:
        seen = _harvest_as_nobody(home, project)
    finally:
        projects.chmod(0o755)
    assert seen["n"] == 0
    assert seen["files_failed"] == 1
    assert any(str(projects) in p and "cannot list" in p for p in seen["problems"])  # type: ignore[attr-defined]


def test_subagent_transcripts_stay_out_of_the_walk(tmp_path: Path) -> None:
    home, project = tmp_path / "claude", tmp_path / "proj"
    project.mkdir()
    path = write_claude_session(home, cwd=project, turns=[Turn(user="a task")], start=_START)
    (path.parent / "s1" / "subagents").mkdir(parents=True)
    shutil.copy(path, path.parent / "s1" / "subagents" / "x.jsonl")
    shutil.copy(path, path.parent / "agent-1.jsonl")
    assert list(claude_code.session_files(home)) == [path]


def _chain(base: Path, levels: int) -> None:
    """``levels`` nested folders of 243-character names below ``base`` (relative to one open
    folder at a time: the whole path is far longer than PATH_MAX), a transcript at the end."""
    fd = os.open(base, os.O_RDONLY)
    try:
        for level in range(levels):
            name = f"{level:03d}" + "d" * 240
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        out = os.open("deep.jsonl", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.close(out)
    finally:
        os.close(fd)


def test_a_folder_deeper_than_the_walk_and_path_max_is_named_in_the_problems(
    tmp_path: Path,
) -> None:
    """Issue 32 item 3: it was skipped with ``problems: []``."""
    home, project = tmp_path / "claude", tmp_path / "proj"
    project.mkdir()
    path = write_claude_session(home, cwd=project, turns=[Turn(user="a task")], start=_START)
    _chain(path.parent, 20)
    result = harvest([SourceSpec(kind=SourceKind.CLAUDE_CODE, home=home)], since=None,
                     project=project, limit=100)  # fmt: skip
    problems = result.diagnostics.to_dict()["problems"]
    assert len(result.digests) == 1
    assert any("not entered" in p and "8 levels deep" in p for p in problems), problems


def test_a_root_that_is_a_link_loop_is_named_in_the_problems(tmp_path: Path) -> None:
    home = tmp_path / "claude"
    home.mkdir()
    (home / "projects").symlink_to(home / "projects")  # stat: too many levels of links
    found = list(claude_code.session_files(home))
    assert [type(item) for item in found] == [Unreadable]
    assert str(home / "projects") in found[0].where  # type: ignore[union-attr]
