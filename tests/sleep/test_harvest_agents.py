"""The harvest contract, source by source, on sessions written in each agent's format.

For every agent (Claude Code, Codex, VS Code Copilot Chat, Copilot CLI, Cursor, Pi,
OpenCode): the project and its subdirectories are in scope, an ancestor and a
prefix-sibling are not; our own replay sessions are dropped; secrets are redacted; a
harvested session is not read again until it goes on.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skillopt_sleep.harvest import (
    SELF_MARKER,
    HarvestResult,
    SessionFile,
    SourceKind,
    SourceSpec,
    harvest,
)
from support.agent_sessions import (
    COPILOT_STORE_SCHEMA,
    OPENCODE_SCHEMA,
    StoredSession,
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
SECRET = "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2


@dataclass(frozen=True)
class Agent:
    """How to write one session of this agent under ``root`` for a working directory."""

    kind: SourceKind
    write: Callable[[Path, Path, Sequence[Turn], datetime, str], None]
    home: Callable[[Path], Path]


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


AGENTS = [
    Agent(SourceKind.CLAUDE_CODE, _claude, lambda r: r / "claude"),
    Agent(SourceKind.CODEX, _codex, lambda r: r / "codex"),
    Agent(SourceKind.COPILOT, _vscode, lambda r: r / "Code" / "User"),
    Agent(SourceKind.COPILOT_CLI, _copilot_cli, lambda r: r / "copilot"),
    Agent(SourceKind.COPILOT_CLI, _copilot_store, lambda r: r / "copilot"),
    Agent(SourceKind.CURSOR, _cursor, lambda r: r / "cursor"),
    Agent(SourceKind.PI, _pi, lambda r: r / "pi"),
    Agent(SourceKind.OPENCODE, _opencode, lambda r: r / "opencode" / "opencode.db"),
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
) -> tuple[list[str], HarvestResult]:
    spec = SourceSpec(kind=agent.kind, home=agent.home(root))
    result = harvest([spec], since=None, project=project, limit=50, harvested=harvested)
    return [d.user_intents[0] for d in result.digests], result


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
