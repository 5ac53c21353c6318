"""The harvest contract, source by source, on sessions written in each agent's format.

Every source (each reader of ``sources.LISTERS``: Claude Code, Codex, VS Code Copilot Chat,
Copilot CLI's session folders and its session store, Cursor, Pi, OpenCode) keeps it:

- it finds the project's sessions, newest first, as well-formed digests; the project and its
  subdirectories are in scope, an ancestor and a prefix-sibling are not;
- a malformed line is counted and its session still read; a file it cannot read is counted
  with the reason (or its lines counted and it dropped) and the rest still read;
- it keeps to the window: the time cursor, and a harvested session is not read again until
  it goes on;
- an empty or missing home is no session and no problem;
- our own replay sessions are dropped; secrets are redacted.

A new source joins ``AGENTS`` and must pass all of it; its own format's corners are tested
beside its reader.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skillopt_sleep.harvest import (
    SELF_MARKER,
    HarvestResult,
    SessionDigest,
    SessionFile,
    SourceKind,
    SourceSpec,
    harvest,
)
from skillopt_sleep.harvest.sources import LISTERS
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
    write_copilot_cli_session,
    write_cursor_session,
    write_vscode_session,
    write_vscode_storage,
)
from support.transcripts import Turn, write_claude_session, write_codex_session

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
BAD_LINE = '{"type": "user", "message": '  # cut off mid-record
SECRET = "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2


def _two_turns(ask: str) -> list[Turn]:
    return [Turn(user=ask, answer="Looked into it.", tools=["bash"]), Turn(user="thanks")]


@dataclass(frozen=True)
class Agent:
    """How to write one session of this agent under ``root`` for a working directory, and
    where (``garbage(root, cwd)``) a file it will find and cannot read as a session goes."""

    kind: SourceKind
    write: Callable[[Path, Path, Sequence[Turn], datetime, str], None]
    home: Callable[[Path], Path]
    garbage: Callable[[Path, Path], Path]
    database: bool = False  # every session in one database file: no lines to spoil


def _claude(root: Path, cwd: Path, turns: Sequence[Turn], start: datetime, sid: str) -> None:
    write_claude_session(root / "claude", cwd=cwd, turns=turns, start=start, session_id=sid)


def _codex(root: Path, cwd: Path, turns: Sequence[Turn], start: datetime, sid: str) -> None:
    write_codex_session(root / "codex", cwd=cwd, turns=turns, start=start, session_id=sid)


def _vscode(root: Path, cwd: Path, turns: Sequence[Turn], start: datetime, sid: str) -> None:
    user = root / "Code" / "User"
    storages = user / "workspaceStorage"
    existing = (
        [
            s
            for s in storages.glob("*")
            if (s / "workspace.json").read_text().find(cwd.as_uri() + '"') >= 0
        ]
        if storages.is_dir()
        else []
    )
    storage = existing[0] if existing else write_vscode_storage(user, folder=cwd)
    write_vscode_session(storage, turns=turns, start=start, session_id=sid)


def _copilot_cli(root: Path, cwd: Path, turns: Sequence[Turn], start: datetime, sid: str) -> None:
    write_copilot_cli_session(root / "copilot", cwd=cwd, turns=turns, start=start, session_id=sid)


def _cursor(root: Path, cwd: Path, turns: Sequence[Turn], start: datetime, sid: str) -> None:
    modified = start + timedelta(minutes=2 * len(turns))
    write_cursor_session(
        root / "cursor", project=cwd, turns=turns, modified=modified, session_id=sid, trusted=True
    )


def _pi(root: Path, cwd: Path, turns: Sequence[Turn], start: datetime, sid: str) -> None:
    records: list[dict[str, object]] = [pi_header(sid, cwd, start, 3)]
    parent, now = None, start
    for index, turn in enumerate(turns):
        for role, message in (("u", pi_user(turn.user)), ("a", pi_assistant(turn.answer))):
            entry = f"{role}{index:07d}"
            records.append(pi_message(entry, parent, now, message))
            parent, now = entry, now + timedelta(minutes=1)
    path = jsonl(pi_path(root / "pi", cwd, start, sid), records)
    set_mtime(path, now)


def _upsert(db: Path, schema: str, tables: Sequence[str], sid: str) -> sqlite3.Connection:
    fresh = not db.exists()
    db.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(db, isolation_level=None)
    if fresh:
        conn.executescript(schema)
    for table in tables:
        column = "id" if table in ("sessions", "session") else "session_id"
        conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (sid,))
    return conn


def _stored(
    db: Path,
    schema: str,
    tables: Sequence[str],
    store: Callable[[sqlite3.Connection, Sequence[StoredSession]], None],
) -> Callable[[Path, Path, Sequence[Turn], datetime, str], None]:
    """A writer for an agent that keeps sessions in a database (a session written again
    replaces its rows, as the agent updates them)."""

    def write(root: Path, cwd: Path, turns: Sequence[Turn], start: datetime, sid: str) -> None:
        conn = _upsert(root / db, schema, tables, sid)
        store(conn, [StoredSession(cwd=str(cwd), turns=turns, start=start, session_id=sid)])
        conn.close()

    return write


_copilot_store = _stored(
    Path("copilot/session-store.db"),
    COPILOT_STORE_SCHEMA,
    ("sessions", "turns", "search_index"),
    store_copilot_sessions,
)
_opencode = _stored(
    Path("opencode/opencode.db"),
    OPENCODE_SCHEMA,
    ("session", "message", "part"),
    store_opencode_sessions,
)


def _vscode_garbage(root: Path, cwd: Path) -> Path:
    return write_vscode_storage(root / "Code" / "User", folder=cwd) / "chatSessions" / "x.jsonl"


AGENTS = [
    Agent(
        SourceKind.CLAUDE_CODE,
        _claude,
        lambda r: r / "claude",
        lambda r, cwd: r / "claude" / "projects" / str(cwd).replace("/", "-") / "x.jsonl",
    ),
    Agent(
        SourceKind.CODEX,
        _codex,
        lambda r: r / "codex",
        lambda r, cwd: r / "codex" / "sessions" / "2026" / "11" / "20" / "rollout-x.jsonl",
    ),
    Agent(SourceKind.COPILOT, _vscode, lambda r: r / "Code" / "User", _vscode_garbage),
    Agent(
        SourceKind.COPILOT_CLI,
        _copilot_cli,
        lambda r: r / "copilot",
        lambda r, cwd: r / "copilot" / "session-state" / "x" / "events.jsonl",
    ),
    Agent(
        SourceKind.COPILOT_CLI,
        _copilot_store,
        lambda r: r / "copilot",
        lambda r, cwd: r / "copilot" / "session-store.db",
        database=True,
    ),
    Agent(
        SourceKind.CURSOR,
        _cursor,
        lambda r: r / "cursor",
        lambda r, cwd: (
            r / "cursor" / "projects" / cursor_slug(cwd) / "agent-transcripts" / "x.jsonl"
        ),
    ),
    Agent(SourceKind.PI, _pi, lambda r: r / "pi", lambda r, cwd: pi_path(r / "pi", cwd, T0, "x")),
    Agent(
        SourceKind.OPENCODE,
        _opencode,
        lambda r: r / "opencode" / "opencode.db",
        lambda r, cwd: r / "opencode" / "opencode.db",
        database=True,
    ),
]
IDS = ["claude_code", "codex", "vscode", "copilot_cli", "copilot_store", "cursor", "pi", "opencode"]


@pytest.fixture(params=AGENTS, ids=IDS)
def agent(request: pytest.FixtureRequest) -> Agent:
    value: Agent = request.param
    return value


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    work = tmp_path / "work"
    paths = {
        "project": work / "proj",
        "subdir": work / "proj" / "pkg",
        "ancestor": work,
        "sibling": work / "proj-old",
    }
    for path in paths.values():
        path.mkdir(parents=True, exist_ok=True)
    return paths


def _harvest(
    agent: Agent,
    root: Path,
    project: Path | None,
    harvested: frozenset[SessionFile] | None = None,
    since: datetime | None = None,
) -> tuple[list[str], HarvestResult]:
    spec = SourceSpec(kind=agent.kind, home=agent.home(root))
    result = harvest([spec], since=since, project=project, limit=50, harvested=harvested)
    return [d.user_intents[0] for d in result.digests], result


def test_every_source_is_under_contract() -> None:
    assert {a.kind for a in AGENTS} == set(LISTERS) == set(SourceKind)


def test_the_projects_sessions_come_newest_first_as_well_formed_digests(
    agent: Agent, tmp_path: Path, places: dict[str, Path]
) -> None:
    root = tmp_path / "homes"
    agent.write(root, places["project"], _two_turns("Fix the flaky test"), T0, "s-old")
    later = T0 + timedelta(hours=1)
    agent.write(root, places["subdir"], _two_turns("Where is the parser?"), later, "s-new")
    intents, result = _harvest(agent, root, places["project"])
    assert intents == ["Where is the parser?", "Fix the flaky test"]
    assert [d.session_id for d in result.digests] == ["s-new", "s-old"]
    assert result.diagnostics.files_failed == 0 and result.diagnostics.problems == ()
    for digest in result.digests:
        _well_formed(digest, agent.kind, places["project"])
    assert [d.cwd for d in result.digests] == [places["subdir"], places["project"]]


def _well_formed(digest: SessionDigest, kind: SourceKind, project: Path) -> None:
    assert digest.source is kind and digest.session_id
    # a database's sessions are named "<database>#<session id>"
    assert Path(str(digest.path).partition("#")[0]).is_file()
    assert digest.cwd is not None and digest.cwd.is_relative_to(project)
    for moment in (digest.started_at, digest.ended_at):
        assert moment.utcoffset() == timedelta(0), moment
    assert digest.started_at <= digest.ended_at
    assert len(digest.user_intents) >= 1 and all(digest.user_intents)
    assert digest.n_user_turns >= len(digest.user_intents)
    assert digest.final_answer and digest.n_assistant_turns >= 1
    assert digest.to_dict()["source"] == kind.value


def test_a_malformed_line_is_counted_and_its_session_still_read(
    agent: Agent, tmp_path: Path
) -> None:
    if agent.database:
        pytest.skip("its sessions are rows of a database, not lines")
    root, project = tmp_path / "homes", tmp_path / "proj"
    project.mkdir()
    agent.write(root, project, _two_turns("Fix the flaky test"), T0, "s-1")
    [path] = agent.home(root).rglob("*.jsonl")
    stat = path.stat()
    with path.open("a", encoding="utf-8") as handle:
        handle.write(BAD_LINE + "\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    intents, result = _harvest(agent, root, project)
    assert intents == ["Fix the flaky test"]
    assert result.diagnostics.malformed_lines == 1


def test_a_file_it_cannot_read_is_recorded_and_the_rest_still_read(
    agent: Agent, tmp_path: Path
) -> None:
    root, project = tmp_path / "homes", tmp_path / "proj"
    project.mkdir()
    if not agent.database:  # a database's one file holds every session
        agent.write(root, project, _two_turns("Fix the flaky test"), T0, "s-1")
    garbage = agent.garbage(root, project)
    garbage.parent.mkdir(parents=True, exist_ok=True)
    garbage.write_bytes(b"SQLite format 3\x00\xff\xfe not a session {{{\n" + BAD_LINE.encode())
    set_mtime(garbage, T0 + timedelta(hours=5))
    intents, result = _harvest(agent, root, project)
    assert intents == ([] if agent.database else ["Fix the flaky test"])
    diagnostics = result.diagnostics
    if diagnostics.files_failed:  # not a file of this source: failed, with the reason
        assert diagnostics.files_failed == 1 and len(diagnostics.problems) == 1
        assert str(garbage) in diagnostics.problems[0]
    else:  # lines of no session: each counted, the file dropped as no session
        assert diagnostics.malformed_lines == 2 and sum(diagnostics.dropped.values()) == 1


def test_sessions_that_ended_before_the_window_are_left_alone(agent: Agent, tmp_path: Path) -> None:
    root, project = tmp_path / "homes", tmp_path / "proj"
    project.mkdir()
    agent.write(root, project, _two_turns("Fix the flaky test"), T0, "s-old")
    later = T0 + timedelta(days=2)
    agent.write(root, project, _two_turns("Where is the parser?"), later, "s-new")
    intents, _ = _harvest(agent, root, project, since=T0 + timedelta(days=1))
    assert intents == ["Where is the parser?"]
    intents, _ = _harvest(agent, root, project, since=later + timedelta(days=1))
    assert intents == []


@pytest.mark.parametrize("state", ["empty", "missing"])
def test_an_empty_or_missing_home_is_no_session_and_no_problem(
    agent: Agent, tmp_path: Path, state: str
) -> None:
    root, project = tmp_path / "homes", tmp_path / "proj"
    project.mkdir()
    home = agent.home(root)
    if state == "empty":
        (home.parent if agent.database else home).mkdir(parents=True)
    _, result = _harvest(agent, root, project, harvested=frozenset())
    assert result.digests == () and result.visited == ()
    assert result.diagnostics.files_failed == 0 and result.diagnostics.problems == ()


def test_scope_is_the_project_and_its_subdirectories(
    agent: Agent, tmp_path: Path, places: dict[str, Path]
) -> None:
    root = tmp_path / "homes"
    for n, (name, cwd) in enumerate(places.items()):
        agent.write(root, cwd, [Turn(user=f"Request made in the {name}")], T0, f"s-{name}-{n}")
    intents, _ = _harvest(agent, root, places["project"])
    assert sorted(intents) == ["Request made in the project", "Request made in the subdir"]
    everything, result = _harvest(agent, root, None)
    assert len(everything) == 4
    assert len({d.path for d in result.digests}) == 4  # mining keys sessions by path


def test_our_own_replay_sessions_are_dropped(agent: Agent, tmp_path: Path) -> None:
    root, project = tmp_path / "homes", tmp_path / "proj"
    project.mkdir()
    agent.write(root, project, [Turn(user=f"{SELF_MARKER}\nReplay this task please")], T0, "own")
    agent.write(root, project, [Turn(user="A request the user typed")], T0, "theirs")
    intents, result = _harvest(agent, root, project)
    assert intents == ["A request the user typed"]
    assert result.diagnostics.dropped == {"self_generated": 1}


def test_secrets_are_redacted(agent: Agent, tmp_path: Path) -> None:
    root, project = tmp_path / "homes", tmp_path / "proj"
    project.mkdir()
    turns = [Turn(user=f"Deploy with token {SECRET}", answer=f"Used {SECRET} to deploy")]
    agent.write(root, project, turns, T0, "leaky")
    _, result = _harvest(agent, root, project)
    (digest,) = result.digests
    text = repr(digest.to_dict())
    assert SECRET not in text
    assert "[REDACTED:github_token]" in digest.user_intents[0]


def test_a_harvested_session_is_read_again_only_when_it_went_on(
    agent: Agent, tmp_path: Path
) -> None:
    root, project = tmp_path / "homes", tmp_path / "proj"
    project.mkdir()
    agent.write(root, project, [Turn(user="Write the release notes")], T0, "sess-1")
    _, first = _harvest(agent, root, project, harvested=frozenset())
    visited = frozenset(first.visited)
    assert len(visited) == 1
    _, again = _harvest(agent, root, project, harvested=visited)
    assert again.digests == () and again.diagnostics.files_harvested_before == 1
    later = T0 + timedelta(hours=1)
    turns = [Turn(user="Write the release notes"), Turn(user="now add the upgrade steps")]
    agent.write(root, project, turns, later, "sess-1")
    intents, grown = _harvest(agent, root, project, harvested=visited)
    assert intents == ["Write the release notes"]
    assert grown.digests[0].user_intents[1] == "now add the upgrade steps"
