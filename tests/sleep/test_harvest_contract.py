"""The contract every transcript source keeps, checked on each of them through ``harvest``.

A source (a reader in ``skillopt_sleep.harvest``, listed in ``sources.LISTERS``) finds the
project's sessions and no one else's, returns them as well-formed :class:`SessionDigest`
records, survives a malformed line and a malformed file and says so in the diagnostics,
keeps to the harvest window (the time cursor and the per-file cursor), and finds nothing,
without a problem, in an empty or a missing home. Each source's own formats and corners are
tested beside its reader; a new source joins ``SOURCES`` below and must pass all of this.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skillopt_sleep.harvest import (
    HarvestResult,
    SessionDigest,
    SessionFile,
    SourceKind,
    SourceSpec,
    harvest,
)
from skillopt_sleep.harvest.sources import LISTERS
from support.agent_sessions import (
    OPENCODE_SCHEMA,
    StoredSession,
    cursor_slug,
    jsonl,
    pi_assistant,
    pi_header,
    pi_message,
    pi_path,
    pi_user,
    set_mtime,
    store_opencode_sessions,
    wal_database,
    write_copilot_cli_session,
    write_cursor_session,
    write_vscode_session,
    write_vscode_storage,
)
from support.transcripts import Turn, write_claude_session, write_codex_session

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
BAD_LINE = '{"type": "user", "message": '  # cut off mid-record


@dataclass(frozen=True)
class Source:
    """How to put sessions where one source looks for them.

    ``write`` stores one session (two turns, the first user message ``ask``) that started
    at ``start`` with ``bad_line`` appended where the format has lines; ``spoil`` leaves a
    file the source will find and cannot read as a session.
    """

    kind: SourceKind
    home: Callable[[Path], Path]
    write: Callable[[Path, Path, str, str, datetime, bool], None]
    spoil: Callable[[Path, Path], Path]
    has_lines: bool = True


def _turns(ask: str) -> list[Turn]:
    return [Turn(user=ask, answer="Looked into it.", tools=["bash"]), Turn(user="thanks")]


def _extra(bad_line: bool) -> list[str]:
    return [BAD_LINE] if bad_line else []


def _claude(home: Path, cwd: Path, sid: str, ask: str, start: datetime, bad: bool) -> None:
    write_claude_session(
        home, cwd=cwd, turns=_turns(ask), start=start, session_id=sid, extra_lines=_extra(bad)
    )


def _codex(home: Path, cwd: Path, sid: str, ask: str, start: datetime, bad: bool) -> None:
    write_codex_session(
        home, cwd=cwd, turns=_turns(ask), start=start, session_id=sid, extra_lines=_extra(bad)
    )


def _vscode(home: Path, cwd: Path, sid: str, ask: str, start: datetime, bad: bool) -> None:
    storage = write_vscode_storage(home, folder=cwd)
    write_vscode_session(storage, turns=_turns(ask), start=start, session_id=sid, extra=_extra(bad))


def _copilot_cli(home: Path, cwd: Path, sid: str, ask: str, start: datetime, bad: bool) -> None:
    write_copilot_cli_session(
        home, cwd=cwd, turns=_turns(ask), start=start, session_id=sid, extra=_extra(bad)
    )


def _cursor(home: Path, cwd: Path, sid: str, ask: str, start: datetime, bad: bool) -> None:
    # Cursor's transcripts carry no times: the file's own is the session's.
    write_cursor_session(
        home,
        project=cwd,
        turns=_turns(ask),
        modified=start + timedelta(minutes=4),
        session_id=sid,
        trusted=True,
        extra=_extra(bad),
    )


def _pi(home: Path, cwd: Path, sid: str, ask: str, start: datetime, bad: bool) -> None:
    records: list[dict[str, object] | str] = [pi_header(sid, cwd, start, 3)]
    parent: str | None = None
    for index, turn in enumerate(_turns(ask)):
        at = start + timedelta(minutes=2 * index)
        records.append(pi_message(f"u{index}", parent, at, pi_user(turn.user)))
        reply = pi_assistant(turn.answer)
        records.append(pi_message(f"a{index}", f"u{index}", at + timedelta(minutes=1), reply))
        parent = f"a{index}"
    path = jsonl(pi_path(home, cwd, start, sid), records + _extra(bad))
    set_mtime(path, start + timedelta(minutes=4))


def _opencode(db: Path, cwd: Path, sid: str, ask: str, start: datetime, bad: bool) -> None:
    conn = wal_database(db, OPENCODE_SCHEMA) if not db.exists() else sqlite3.connect(db)
    try:
        session = StoredSession(cwd=str(cwd), turns=_turns(ask), start=start, session_id=sid)
        store_opencode_sessions(conn, [session])
        conn.commit()
    finally:
        conn.close()


def _spoil_lines(where: Callable[[Path, Path], Path]) -> Callable[[Path, Path], Path]:
    """A session file of two garbage lines where ``where(home, cwd)`` says sessions live."""

    def spoil(home: Path, cwd: Path) -> Path:
        path = where(home, cwd)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\x00\xff not a transcript {{{\n" + BAD_LINE.encode() + b"\n")
        set_mtime(path, T0 + timedelta(hours=5))
        return path

    return spoil


def _spoil_opencode(db: Path, cwd: Path) -> Path:
    db.parent.mkdir(parents=True, exist_ok=True)
    db.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)  # a header, then nonsense
    return db


SOURCES = (
    Source(
        kind=SourceKind.CLAUDE_CODE,
        home=lambda tmp: tmp / "claude",
        write=_claude,
        spoil=_spoil_lines(
            lambda home, cwd: home / "projects" / str(cwd).replace("/", "-") / "bad.jsonl"
        ),
    ),
    Source(
        kind=SourceKind.CODEX,
        home=lambda tmp: tmp / "codex",
        write=_codex,
        spoil=_spoil_lines(
            lambda home, cwd: home / "sessions" / "2026" / "11" / "20" / "rollout-bad.jsonl"
        ),
    ),
    Source(
        kind=SourceKind.COPILOT,
        home=lambda tmp: tmp / "Code" / "User",
        write=_vscode,
        spoil=_spoil_lines(
            lambda home, cwd: write_vscode_storage(home, folder=cwd) / "chatSessions" / "bad.jsonl"
        ),
    ),
    Source(
        kind=SourceKind.COPILOT_CLI,
        home=lambda tmp: tmp / "copilot",
        write=_copilot_cli,
        spoil=_spoil_lines(lambda home, cwd: home / "session-state" / "bad" / "events.jsonl"),
    ),
    Source(
        kind=SourceKind.CURSOR,
        home=lambda tmp: tmp / "cursor",
        write=_cursor,
        spoil=_spoil_lines(
            lambda home, cwd: (
                home / "projects" / cursor_slug(cwd) / "agent-transcripts" / "b" / "b.jsonl"
            )
        ),
    ),
    Source(
        kind=SourceKind.PI,
        home=lambda tmp: tmp / "pi",
        write=_pi,
        spoil=_spoil_lines(lambda home, cwd: pi_path(home, cwd, T0, "bad")),
    ),
    Source(
        kind=SourceKind.OPENCODE,
        home=lambda tmp: tmp / "opencode" / "opencode.db",
        write=_opencode,
        spoil=_spoil_opencode,
        has_lines=False,
    ),
)
IDS = [s.kind.value for s in SOURCES]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "work" / "proj"
    (path / "pkg").mkdir(parents=True)
    return path


def _harvest(
    source: Source,
    home: Path,
    project: Path,
    *,
    since: datetime | None = None,
    harvested: frozenset[SessionFile] | None = None,
) -> HarvestResult:
    spec = SourceSpec(kind=source.kind, home=home)
    return harvest([spec], since=since, project=project, limit=20, harvested=harvested)


def test_every_source_is_under_contract() -> None:
    assert {s.kind for s in SOURCES} == set(LISTERS) == set(SourceKind)


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_finds_the_projects_sessions_as_well_formed_digests(
    source: Source, tmp_path: Path, project: Path
) -> None:
    home = source.home(tmp_path)
    source.write(home, project, "s-old", "Fix the flaky test", T0, False)
    later = T0 + timedelta(hours=1)
    source.write(home, project / "pkg", "s-new", "Where is the parser?", later, False)
    elsewhere = tmp_path / "work" / "other"
    elsewhere.mkdir()
    source.write(home, elsewhere, "s-else", "Not this project", T0 + timedelta(hours=2), False)

    result = _harvest(source, home, project)

    assert [d.session_id for d in result.digests] == ["s-new", "s-old"]  # newest first
    assert result.diagnostics.files_failed == 0 and result.diagnostics.problems == ()
    for digest in result.digests:
        _well_formed(digest, source.kind, project)
    new, old = result.digests
    assert new.user_intents[0] == "Where is the parser?" and new.cwd == project / "pkg"
    assert old.user_intents[0] == "Fix the flaky test" and old.cwd == project


def _well_formed(digest: SessionDigest, kind: SourceKind, project: Path) -> None:
    assert digest.source is kind
    # a database's sessions are named "<database>#<session id>"
    assert digest.session_id and Path(str(digest.path).partition("#")[0]).is_file()
    assert digest.cwd is not None and digest.cwd.is_relative_to(project)
    for moment in (digest.started_at, digest.ended_at):
        assert moment.utcoffset() == timedelta(0), moment
    assert digest.started_at <= digest.ended_at
    assert len(digest.user_intents) >= 1 and all(digest.user_intents)
    assert digest.n_user_turns >= len(digest.user_intents) >= 1
    assert digest.final_answer and digest.n_assistant_turns >= 1
    assert digest.to_dict()["source"] == kind.value


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_a_malformed_line_is_counted_and_the_session_still_read(
    source: Source, tmp_path: Path, project: Path
) -> None:
    if not source.has_lines:
        pytest.skip(f"{source.kind.value} keeps rows in a database, not lines")
    home = source.home(tmp_path)
    source.write(home, project, "s-1", "Fix the flaky test", T0, True)
    result = _harvest(source, home, project)
    assert [d.session_id for d in result.digests] == ["s-1"]
    assert result.diagnostics.malformed_lines >= 1


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_a_malformed_file_is_recorded_and_the_rest_still_read(
    source: Source, tmp_path: Path, project: Path
) -> None:
    home = source.home(tmp_path)
    if source.kind is not SourceKind.OPENCODE:  # its one file holds every session
        source.write(home, project, "s-1", "Fix the flaky test", T0, False)
    spoiled = source.spoil(home, project)
    result = _harvest(source, home, project)
    if source.kind is not SourceKind.OPENCODE:
        assert [d.session_id for d in result.digests] == ["s-1"]
    else:
        assert result.digests == ()
    diagnostics = result.diagnostics
    if diagnostics.files_failed:  # a file that is not this source's: failed, with the reason
        assert diagnostics.files_failed == 1 and len(diagnostics.problems) == 1
        assert str(spoiled) in diagnostics.problems[0]
    else:  # lines of no session: each counted, the file dropped as no session
        assert diagnostics.malformed_lines == 2 and sum(diagnostics.dropped.values()) == 1


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_keeps_to_the_window_and_to_the_files_already_harvested(
    source: Source, tmp_path: Path, project: Path
) -> None:
    home = source.home(tmp_path)
    source.write(home, project, "s-old", "Fix the flaky test", T0, False)
    source.write(home, project, "s-new", "Where is the parser?", T0 + timedelta(days=2), False)

    since = _harvest(source, home, project, since=T0 + timedelta(days=1))
    assert [d.session_id for d in since.digests] == ["s-new"]

    first = _harvest(source, home, project, harvested=frozenset())
    assert [d.session_id for d in first.digests] == ["s-new", "s-old"]
    assert len(first.visited) == 2
    again = _harvest(source, home, project, harvested=frozenset(first.visited))
    assert again.digests == () and again.diagnostics.files_harvested_before == 2


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
@pytest.mark.parametrize("state", ["empty", "missing"])
def test_an_empty_or_missing_home_is_no_sessions_and_no_problem(
    source: Source, tmp_path: Path, project: Path, state: str
) -> None:
    home = source.home(tmp_path)
    if state == "empty":
        (home if source.has_lines else home.parent).mkdir(parents=True)
    result = _harvest(source, home, project)
    assert result.digests == () and result.visited == ()
    assert result.diagnostics.files_failed == 0 and result.diagnostics.problems == ()
