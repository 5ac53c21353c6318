"""Each agent's own format, odd corners included: what a digest takes from it and what not."""

from __future__ import annotations

import json
import os
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skillopt_sleep.harvest import SourceKind, SourceSpec, harvest
from skillopt_sleep.harvest.sqlite_ro import open_readonly, read_transaction
from support.agent_sessions import (
    COPILOT_STORE_SCHEMA,
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
    store_copilot_sessions,
    store_opencode_sessions,
    vscode_request,
    wal_database,
    write_copilot_cli_session,
    write_cursor_session,
    write_vscode_session,
    write_vscode_storage,
)
from support.transcripts import Turn

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "work" / "proj"
    (path / "pkg").mkdir(parents=True)
    return path


def _one(kind: SourceKind, home: Path, project: Path | None):  # type: ignore[no-untyped-def]
    result = harvest([SourceSpec(kind=kind, home=home)], since=None, project=project, limit=20)
    return result


# -- VS Code Copilot Chat -------------------------------------------------------------------
def test_vscode_log_patches_are_applied_in_order(tmp_path: Path, project: Path) -> None:
    user = tmp_path / "Code" / "User"
    storage = write_vscode_storage(user, folder=project)
    other = {
        **vscode_request(Turn(user="@other explain this"), T0),
        "agent": {"extensionId": {"value": "someone.other-chat", "_lower": "someone.other-chat"}},
    }
    system = {
        **vscode_request(Turn(user="Summarize the conversation"), T0),
        "isSystemInitiated": True,
    }
    write_vscode_session(
        storage,
        session_id="chat-1",
        start=T0,
        skill_file=f"{project}/.github/skills/release-notes/SKILL.md",
        turns=[
            Turn(
                user="Draft the release notes for 2.0",
                answer="Here is a draft.",
                tools=["copilot_readFile"],
            ),
            Turn(user="no, shorter please", answer="Shorter draft, fully streamed."),
            Turn(user="and add the upgrade steps", answer="Added the upgrade steps."),
        ],
        extra=[
            {"kind": 2, "k": ["requests"], "v": [other, system]},
            {"kind": 1, "k": ["requests", 9, "modelState"], "v": {"value": 1}},  # no such request
            {"kind": 7, "k": ["requests"]},  # no such kind
            "{not json",
            {"kind": 1, "k": ["requests", 0, "variableData"], "v": {"huge": "x" * 5000}},
            {"kind": 3, "k": ["requests", 2, "message", "parts"]},
        ],
    )
    result = _one(SourceKind.COPILOT, user, project)
    (digest,) = result.digests
    assert digest.source is SourceKind.COPILOT and digest.session_id == "chat-1"
    assert digest.user_intents == (
        "Draft the release notes for 2.0",
        "no, shorter please",
        "and add the upgrade steps",
    )
    assert digest.assistant_finals == (
        "Here is a draft.",
        "Shorter draft, fully streamed.",
        "Added the upgrade steps.",
    )
    assert digest.tools_used == ("copilot_readFile",)
    assert digest.skill_hint == "release-notes"
    assert digest.cwd == project.resolve()
    assert digest.started_at == T0
    assert digest.ended_at == T0 + timedelta(minutes=4, seconds=30)
    assert [s.label() for s in digest.feedback] == ["neg:no"]
    assert result.diagnostics.malformed_lines == 3


def test_vscode_project_comes_from_workspace_json(tmp_path: Path, project: Path) -> None:
    user = tmp_path / "Code - Insiders" / "User"
    code_workspace = project / "pkg" / "team.code-workspace"
    placed = {
        "folder": write_vscode_storage(user, folder=project),
        "workspace file": write_vscode_storage(user, workspace_file=code_workspace),
        "sibling": write_vscode_storage(user, folder=project.parent / "proj-old"),
        "remote": write_vscode_storage(user, remote="vscode-remote://ssh-remote%2Bbox/srv/proj"),
    }
    for name, storage in placed.items():
        write_vscode_session(storage, turns=[Turn(user=f"Asked in the {name}")], start=T0)
    mine = _one(SourceKind.COPILOT, user, project)
    assert sorted(d.user_intents[0] for d in mine.digests) == [
        "Asked in the folder",
        "Asked in the workspace file",
    ]
    assert {d.cwd for d in mine.digests} == {project.resolve(), (project / "pkg").resolve()}
    assert mine.diagnostics.files_seen == 2  # the others were not even listed
    assert len(_one(SourceKind.COPILOT, user, None).digests) == 4


# -- Copilot CLI ----------------------------------------------------------------------------
def test_copilot_cli_event_log(tmp_path: Path, project: Path) -> None:
    home = tmp_path / "copilot"
    subagent = {
        "type": "user.message",
        "agentId": "explore-1",
        "timestamp": "2026-11-20T08:09Z",
        "data": {"content": "Search the repo for TODOs"},
        "id": "x",
        "parentId": None,
    }
    write_copilot_cli_session(
        home,
        cwd=project / "pkg",
        session_id="cli-1",
        start=T0,
        skill="release-notes",
        turns=[
            Turn(user="Draft the migration plan", answer="Plan drafted.", tools=["bash"]),
            Turn(user="that is wrong, add a rollback step", answer="Rollback added."),
        ],
        extra=[json.dumps(subagent), "garbage line", "[1, 2]"],
    )
    result = _one(SourceKind.COPILOT_CLI, home, project)
    (digest,) = result.digests
    assert digest.session_id == "cli-1" and digest.cwd == (project / "pkg").resolve()
    assert digest.user_intents == ("Draft the migration plan", "that is wrong, add a rollback step")
    assert digest.assistant_finals == ("Plan drafted.", "Rollback added.")
    assert digest.tools_used == ("bash", "skill")
    assert digest.skill_hint == "release-notes"
    assert digest.git_branch == "main"
    assert [s.label() for s in digest.feedback] == ["neg:wrong"]
    assert result.diagnostics.malformed_lines == 2


def test_copilot_cli_store_fills_in_for_missing_event_logs(tmp_path: Path, project: Path) -> None:
    home = tmp_path / "copilot"
    write_copilot_cli_session(
        home,
        cwd=project,
        session_id="both",
        start=T0,
        turns=[Turn(user="From the event log, in full")],
    )
    conn = wal_database(home / "session-store.db", COPILOT_STORE_SCHEMA)
    store_copilot_sessions(
        conn,
        [
            StoredSession(
                cwd=str(project),
                session_id="both",
                start=T0,
                turns=[Turn(user="The store's lossy copy")],
            ),
            StoredSession(
                cwd=str(project),
                session_id="only-stored",
                start=T0,
                turns=[
                    Turn(user="Rename the config keys", answer="Renamed."),
                    Turn(user="thanks, now update the docs", answer="Updated."),
                ],
                files=[(f"{project}/.github/skills/docs-style/SKILL.md", "view")],
            ),
            StoredSession(
                cwd=str(project.parent),
                session_id="elsewhere",
                start=T0,
                turns=[Turn(user="Not this project")],
            ),
        ],
    )
    try:  # the CLI is still running: its last writes are only in the -wal file
        assert (home / "session-store.db-wal").stat().st_size > 0
        result = _one(SourceKind.COPILOT_CLI, home, project)
        conn.execute("INSERT INTO sessions (id, cwd) VALUES ('new', '/x')")  # never locked out
    finally:
        conn.close()
    by_id = {d.session_id: d for d in result.digests}
    assert set(by_id) == {"both", "only-stored"}
    assert by_id["both"].user_intents == ("From the event log, in full",)
    stored = by_id["only-stored"]
    assert stored.user_intents == ("Rename the config keys", "thanks, now update the docs")
    assert stored.assistant_finals == ("Renamed.", "Updated.")
    assert stored.skill_hint == "docs-style" and stored.tools_used == ("view",)
    assert stored.path == home / "session-store.db#only-stored"  # one path per session
    assert result.diagnostics.files_seen == 2


def test_a_database_that_is_not_the_store_is_reported(tmp_path: Path, project: Path) -> None:
    home = tmp_path / "copilot"
    home.mkdir()
    conn = sqlite3.connect(home / "session-store.db")
    conn.execute("CREATE TABLE sessions (id TEXT)")
    conn.close()
    result = _one(SourceKind.COPILOT_CLI, home, project)
    assert result.digests == () and result.diagnostics.files_failed == 1
    assert "sessions lacks cwd, updated_at" in result.diagnostics.problems[0]


# -- Cursor ---------------------------------------------------------------------------------
def test_cursor_transcript(tmp_path: Path, project: Path) -> None:
    home = tmp_path / "cursor"
    modified = T0 + timedelta(hours=1)
    write_cursor_session(
        home,
        project=project,
        session_id="cur-1",
        trusted=True,
        modified=modified,
        failed_turns=[1],
        skill_file=f"{project}/.cursor/skills/db-migrations/SKILL.md",
        turns=[
            Turn(user="Write the migration for the users table", tools=["Read", "Shell"]),
            Turn(user="it still fails on sqlite", answer="Fixed for sqlite."),
        ],
        extra=["{broken"],
    )
    result = _one(SourceKind.CURSOR, home, project)
    (digest,) = result.digests
    assert digest.session_id == "cur-1" and digest.cwd == project.resolve()
    assert digest.user_intents == (
        "Write the migration for the users table",
        "it still fails on sqlite",
    )
    assert digest.final_answer == "Fixed for sqlite."
    assert digest.tools_used == ("Read", "Shell")
    assert digest.skill_hint == "db-migrations"
    assert [s.label() for s in digest.feedback] == ["neg:still_broken", "neg:turn_error"]
    assert digest.started_at == digest.ended_at == modified  # no timestamps: the file's time
    assert result.diagnostics.malformed_lines == 1


def test_cursor_project_from_the_lossy_folder_name(tmp_path: Path, project: Path) -> None:
    home = tmp_path / "cursor"
    (project / "web_app").mkdir()
    sibling = project.parent / "proj-old"
    sibling.mkdir()
    for name, cwd in [
        ("project", project),
        ("subdir", project / "web_app"),
        ("sibling", sibling),
        ("ancestor", project.parent),
    ]:
        write_cursor_session(home, project=cwd, modified=T0, turns=[Turn(user=f"From {name}")])
    assert cursor_slug(project / "web_app").endswith("proj-web-app")
    result = _one(SourceKind.CURSOR, home, project)
    assert {d.user_intents[0]: d.cwd for d in result.digests} == {
        "From project": project.resolve(),
        "From subdir": (project / "web_app").resolve(),
    }
    everything = _one(SourceKind.CURSOR, home, None)
    assert len(everything.digests) == 4 and all(d.cwd is None for d in everything.digests)


# -- Pi -------------------------------------------------------------------------------------
def _pi_session(home: Path, cwd: Path, records: list[dict[str, object] | str]) -> Path:
    path = jsonl(pi_path(home, cwd, T0, "pi-1"), records)
    set_mtime(path, T0 + timedelta(hours=1))
    return path


@pytest.mark.parametrize("version", [2, 3])
def test_pi_reads_only_the_active_branch(tmp_path: Path, project: Path, version: int) -> None:
    home, at = tmp_path / "pi", [T0 + timedelta(minutes=m) for m in range(9)]
    skill = (
        f'<skill name="release-notes" location="{project}/.pi/skills/release-notes/'
        'SKILL.md">\nReferences are relative to x.\n\nWrite notes.\n</skill>\n\n'
        "User: draft the 2.0 notes"
    )
    _pi_session(
        home,
        project,
        [
            pi_header("pi-1", project, T0, version),
            {
                "type": "model_change",
                "id": "m0",
                "parentId": None,
                "timestamp": "2026-11-20T08:00Z",
                "provider": "anthropic",
                "modelId": "claude-x",
            },
            pi_message("u1", "m0", at[1], pi_user(skill)),
            pi_message(
                "a1", "u1", at[2], pi_assistant("Drafted.", [("read", {"path": "CHANGES"})])
            ),
            pi_message("u2", "a1", at[3], pi_user("use the abandoned approach")),
            pi_message("a2", "u2", at[4], pi_assistant("Abandoned answer.")),
            {
                "type": "branch_summary",
                "id": "b1",
                "parentId": "a1",
                "timestamp": "2026-11-20T08:05Z",
                "fromId": "a2",
                "summary": "Tried the abandoned approach",
            },
            pi_message("u3", "b1", at[6], pi_user("no, keep it to five bullets")),
            {
                "type": "message",
                "id": "t3",
                "parentId": "u3",
                "timestamp": "2026-11-20T08:07Z",
                "message": {
                    "role": "toolResult",
                    "toolName": "bash",
                    "content": [],
                    "isError": False,
                },
            },
            "{truncated",
            pi_message("a3", "t3", at[8], pi_assistant("Five bullets.")),
        ],
    )
    result = _one(SourceKind.PI, home, project)
    (digest,) = result.digests
    assert digest.session_id == "pi-1"
    assert digest.user_intents == ("draft the 2.0 notes", "no, keep it to five bullets")
    assert digest.assistant_finals == ("Drafted.", "Five bullets.")
    assert digest.skill_hint == "release-notes"
    assert digest.tools_used == ("read", "bash")
    assert digest.ended_at == at[8]
    assert result.diagnostics.malformed_lines == 1


def test_pi_version_1_is_a_plain_list(tmp_path: Path, project: Path) -> None:
    home = tmp_path / "pi"
    _pi_session(
        home,
        project,
        [
            pi_header("pi-1", project, T0, None),
            {"type": "message", "timestamp": "2026-11-20T08:01Z", "message": pi_user("First ask")},
            {"type": "message", "timestamp": "2026-11-20T08:02Z", "message": pi_assistant("One.")},
            {"type": "message", "timestamp": "2026-11-20T08:03Z", "message": pi_user("Second ask")},
        ],
    )
    (digest,) = _one(SourceKind.PI, home, project).digests
    assert digest.user_intents == ("First ask", "Second ask")


@pytest.mark.parametrize(
    ("records", "why"),
    [
        ([("u1", None), ("a1", "u1"), ("u1", "a1")], "appears twice"),
        ([("u1", None), ("a1", "u2"), ("u2", "u1")], "not before it"),
        ([("u1", "a1"), ("a1", "u1")], "not before it"),  # a cycle
    ],
)
def test_pi_tree_that_is_not_a_tree_is_unreadable(
    tmp_path: Path, project: Path, records: list[tuple[str, str | None]], why: str
) -> None:
    home = tmp_path / "pi"
    lines: list[dict[str, object] | str] = [pi_header("pi-1", project, T0, 3)]
    lines += [pi_message(i, p, T0, pi_user(f"message {i}")) for i, p in records]
    _pi_session(home, project, lines)
    result = _one(SourceKind.PI, home, project)
    assert result.digests == () and result.diagnostics.files_failed == 1
    assert why in result.diagnostics.problems[0]


# -- OpenCode -------------------------------------------------------------------------------
def test_opencode_root_sessions_from_a_live_database(tmp_path: Path, project: Path) -> None:
    db = tmp_path / "opencode" / "opencode.db"
    conn = wal_database(db, OPENCODE_SCHEMA)
    store_opencode_sessions(
        conn,
        [
            StoredSession(
                cwd=str(project / "pkg"),
                session_id="ses_root",
                start=T0,
                skill="db-migrations",
                error_on_last=True,
                turns=[
                    Turn(user="Add the orders migration", tools=["bash", "edit"]),
                    Turn(user="it still fails", answer="Fixed it."),
                ],
            ),
            StoredSession(
                cwd=str(project),
                session_id="ses_child",
                start=T0,
                parent_id="ses_root",
                turns=[Turn(user="Subtask: find the schema file")],
            ),
            StoredSession(
                cwd="relative/dir",
                session_id="ses_bad",
                start=T0,
                turns=[Turn(user="No absolute directory")],
            ),
        ],
    )
    conn.execute(
        "INSERT INTO part VALUES ('prt_zzz', 'msg_ses_root_0u', 'ses_root', 1, 1, ?)",
        ("{" + '"type": "text", "text": "' + "x" * 5000 + '"}',),
    )
    conn.execute("INSERT INTO part VALUES ('prt_zzy', 'msg_ses_root_0u', 'ses_root', 1, 1, '[')")
    try:
        assert (db.parent / "opencode.db-wal").stat().st_size > 0
        spec = SourceSpec(kind=SourceKind.OPENCODE, home=db)
        result = harvest([spec], since=None, project=project, limit=20, max_line_bytes=4096)
        conn.execute("UPDATE session SET title = 'still writable' WHERE id = 'ses_root'")
    finally:
        conn.close()
    (digest,) = result.digests
    assert digest.session_id == "ses_root" and digest.cwd == (project / "pkg").resolve()
    assert digest.user_intents == ("Add the orders migration", "it still fails")
    assert digest.assistant_finals == ("Done.", "Fixed it.")
    assert digest.tools_used == ("bash", "edit", "skill")
    assert digest.skill_hint == "db-migrations"
    assert [s.label() for s in digest.feedback] == ["neg:still_broken", "neg:turn_error"]
    assert result.diagnostics.files_seen == 1
    assert (result.diagnostics.overlong_lines, result.diagnostics.malformed_lines) == (1, 1)


def test_opencode_needs_its_schema(tmp_path: Path, project: Path) -> None:
    db = tmp_path / "opencode.db"
    sqlite3.connect(db).execute("CREATE TABLE session (id text)").connection.close()
    result = _one(SourceKind.OPENCODE, db, project)
    assert result.diagnostics.files_failed == 1
    assert "not an OpenCode database" in result.diagnostics.problems[0]
    assert _one(SourceKind.OPENCODE, tmp_path / "missing.db", project).diagnostics.files_seen == 0


# -- the read-only connection ---------------------------------------------------------------
def test_a_writer_is_never_locked_out_while_we_read(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    for mode in ("WAL", "DELETE"):
        db.unlink(missing_ok=True)
        setup = sqlite3.connect(db, isolation_level=None)
        setup.execute(f"PRAGMA journal_mode = {mode}")
        setup.execute("CREATE TABLE t (a)")
        setup.execute("INSERT INTO t VALUES (1)")
        setup.close()
        with open_readonly(db) as conn:
            rows = conn.execute("SELECT a FROM t").fetchall()
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                conn.execute("INSERT INTO t VALUES (2)")
            writer = sqlite3.connect(db, isolation_level=None, timeout=0)
            writer.execute("INSERT INTO t VALUES (3)")  # between our queries: no lock held
            if mode == "WAL":
                with read_transaction(conn):
                    writer.execute("INSERT INTO t VALUES (4)")  # WAL: even during our read
            writer.close()
        assert rows == [(1,)]


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_a_database_we_may_not_open_is_read_from_a_copy(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    conn = wal_database(folder / "opencode.db", "CREATE TABLE t (a); INSERT INTO t VALUES (7);")
    for name in ("opencode.db", "opencode.db-wal"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    conn.close()
    for name in ("opencode.db", "opencode.db-wal"):
        (folder / name).write_bytes((tmp_path / name).read_bytes())
    (folder / "opencode.db-shm").unlink(missing_ok=True)
    folder.chmod(0o555)
    try:
        with open_readonly(folder / "opencode.db") as ro:
            assert ro.execute("SELECT a FROM t").fetchall() == [(7,)]
    finally:
        folder.chmod(0o755)


# -- bounded memory ---------------------------------------------------------------------------
def _peak(spec: SourceSpec, project: Path) -> tuple[int, int]:
    import tracemalloc

    tracemalloc.start()
    try:
        result = harvest([spec], since=None, project=project, limit=5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    (digest,) = result.digests
    return peak, digest.n_user_turns


def test_long_sessions_are_read_in_bounded_memory(tmp_path: Path, project: Path) -> None:
    big = "All the details, again and again. " * 6000  # ~200 KB an answer
    turns = [Turn(user=f"Request number {i}", answer=big) for i in range(40)]  # ~8 MB a file
    storage = write_vscode_storage(tmp_path / "Code" / "User", folder=project)
    write_vscode_session(storage, turns=turns, start=T0)
    peak, n = _peak(SourceSpec(kind=SourceKind.COPILOT, home=tmp_path / "Code" / "User"), project)
    assert n == 40 and peak < 3_000_000, peak  # the whole log would be ~16 MB of answers

    records: list[dict[str, object] | str] = [pi_header("pi-1", project, T0, 3)]
    parent = None
    for i, turn in enumerate(turns):
        records.append(pi_message(f"u{i}", parent, T0, pi_user(turn.user)))
        records.append(pi_message(f"a{i}", f"u{i}", T0, pi_assistant(turn.answer)))
        parent = f"a{i}"
    _pi_session(tmp_path / "pi", project, records)
    peak, n = _peak(SourceSpec(kind=SourceKind.PI, home=tmp_path / "pi"), project)
    assert n == 40 and peak < 2_000_000, peak


# -- both databases -------------------------------------------------------------------------
MISENCODED = "CAST(X'4669782074686520636166E920627567' AS TEXT)"  # "Fix the caf\xe9 bug" (Latin-1)


def test_a_misencoded_or_binary_cell_is_counted_not_the_whole_session_lost(
    tmp_path: Path, project: Path
) -> None:
    copilot, opencode = tmp_path / "copilot", tmp_path / "opencode.db"
    conn = wal_database(copilot / "session-store.db", COPILOT_STORE_SCHEMA)
    turns = [Turn(user="Rename the config keys", answer="Renamed."), Turn(user="x", answer="ok")]
    store_copilot_sessions(conn, [StoredSession(cwd=str(project), session_id="s", start=T0,
                                                turns=turns)])  # fmt: skip
    conn.execute(f"UPDATE turns SET user_message = {MISENCODED} WHERE turn_index = 1")
    conn.execute("INSERT INTO turns (session_id, turn_index, user_message) VALUES ('s', 2, X'00')")
    conn.close()
    conn = wal_database(opencode, OPENCODE_SCHEMA)
    turns = [Turn(user="Add the orders migration"), Turn(user="y", answer="Fixed it.")]
    store_opencode_sessions(conn, [StoredSession(cwd=str(project), session_id="ses_root",
                                                 start=T0, turns=turns)])  # fmt: skip
    [(part,)] = conn.execute("SELECT p.id FROM part p JOIN message m ON p.message_id = m.id "
                             "WHERE p.data LIKE '%\"y\"%'").fetchall()  # fmt: skip
    text = "CAST(X'7B2274797065223A2274657874222C2274657874223A22636166E9227D' AS TEXT)"
    conn.execute(f"UPDATE part SET data = {text} WHERE id = ?", (part,))  # {"text": "caf\xe9"}
    conn.close()
    for kind, home, first in (
        (SourceKind.COPILOT_CLI, copilot, "Rename the config keys"),
        (SourceKind.OPENCODE, opencode, "Add the orders migration"),
    ):
        result = _one(kind, home, project)
        (digest,) = result.digests
        assert digest.user_intents[0] == first, kind
        assert "\ufffd" in digest.user_intents[1], kind  # the bad bytes, replaced
        assert result.diagnostics.files_failed == 0 and result.diagnostics.invalid_utf8_lines == 1
    assert _one(SourceKind.COPILOT_CLI, copilot, project).diagnostics.malformed_lines == 1
