"""Sessions where the agents really put them, and words as the agents really store them.

Pi (pi-coding-agent 0.73) writes to ``--session-dir``, ``$PI_CODING_AGENT_SESSION_DIR``,
the ``sessionDir`` setting or ``$PI_CODING_AGENT_DIR/sessions``; OpenCode (opencode-ai
1.18) to ``$OPENCODE_DB`` or ``opencode[-<channel>].db`` in its data folder, and
``opencode run "..."`` stores each argument holding a space in double quotes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skillopt_sleep.harvest import SourceKind, SourceSpec, harvest
from skillopt_sleep.harvest.locations import Homes, default_opencode_dbs, resolve
from skillopt_sleep.harvest.opencode import unquote_run_message
from support.agent_sessions import (
    OPENCODE_SCHEMA,
    StoredSession,
    jsonl,
    pi_assistant,
    pi_header,
    pi_message,
    pi_path,
    pi_user,
    set_mtime,
    store_opencode_sessions,
    wal_database,
)
from support.transcripts import Turn

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "work" / "proj"
    path.mkdir(parents=True)
    return path


def _pi_session(sessions: Path, cwd: Path, session_id: str, ask: str, *, flat: bool) -> Path:
    """One Pi session as pi writes it: in a per-project folder by default, directly in a
    folder the user chose."""
    records: list[dict[str, object] | str] = [
        pi_header(session_id, cwd, T0, 3),
        pi_message("a1", None, T0, pi_user(ask)),
        pi_message("a2", "a1", T0 + timedelta(seconds=5), pi_assistant("Done.")),
    ]
    bucketed = pi_path(sessions, cwd, T0, session_id)
    path = jsonl(sessions / bucketed.name if flat else bucketed, records)
    set_mtime(path, T0 + timedelta(minutes=1))
    return path


def _asks(kind: SourceKind, homes: Homes, project: Path) -> set[str]:
    specs = resolve([kind.value], homes)
    result = harvest(specs, since=None, project=project, limit=50)
    return {d.user_intents[0] for d in result.digests}


# -- Pi ---------------------------------------------------------------------------------------
def test_pi_sessions_are_found_wherever_pi_was_told_to_write_them(
    tmp_path: Path, project: Path
) -> None:
    home = tmp_path / "home"
    agent = tmp_path / "pi-agent"  # PI_CODING_AGENT_DIR
    _pi_session(agent / "sessions", project, "by-agent-dir", "Add the agent dir test", flat=False)
    env_dir = tmp_path / "env-sessions"  # PI_CODING_AGENT_SESSION_DIR
    _pi_session(env_dir, project, "by-env", "Add the env dir test", flat=True)
    global_dir = home / "pi-global"  # sessionDir in the agent dir's settings.json, with ~
    _pi_session(global_dir, project, "by-global", "Add the global setting test", flat=True)
    agent.mkdir(exist_ok=True)
    (agent / "settings.json").write_text(json.dumps({"sessionDir": "~/pi-global"}), "utf-8")
    local = project / ".pi" / "sessions"  # sessionDir in the project's settings, relative
    _pi_session(local, project, "by-project", "Add the project setting test", flat=True)
    (project / ".pi" / "settings.json").write_text(
        json.dumps({"sessionDir": ".pi/sessions"}), "utf-8"
    )
    flag_dir = tmp_path / "flag-sessions"  # pi --session-dir, named in the config
    _pi_session(flag_dir, project, "by-flag", "Add the session dir flag test", flat=True)
    other = tmp_path / "elsewhere"
    _pi_session(env_dir, other, "not-ours", "Someone else's request here", flat=True)

    env = {
        "HOME": str(home),
        "PI_CODING_AGENT_DIR": str(agent),
        "PI_CODING_AGENT_SESSION_DIR": str(env_dir),
    }
    homes = Homes(environ=env, project=project, pi_session_dirs=(flag_dir,))
    assert _asks(SourceKind.PI, homes, project) == {
        "Add the agent dir test",
        "Add the env dir test",
        "Add the global setting test",
        "Add the project setting test",
        "Add the session dir flag test",
    }
    # Without the project, a relative sessionDir cannot be placed; the rest still is.
    anywhere = Homes(environ=env, pi_session_dirs=(flag_dir,))
    folders = {s.home for s in resolve(["pi"], anywhere)}
    assert folders == {flag_dir, env_dir, global_dir, agent / "sessions"}
    # auto finds a moved sessions folder as well.
    auto = {s.home for s in resolve(["auto"], Homes(environ=env)) if s.kind is SourceKind.PI}
    assert env_dir in auto and agent / "sessions" in auto


def test_pi_defaults_and_a_configured_pi_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    default = resolve(["pi"], Homes(environ={"HOME": str(home)}))
    assert [s.home for s in default] == [home / ".pi" / "agent" / "sessions"]
    (home / ".pi" / "agent").mkdir(parents=True)
    (home / ".pi" / "agent" / "settings.json").write_text("{not json", "utf-8")
    assert [s.home for s in resolve(["pi"], Homes(environ={"HOME": str(home)}))] == [
        home / ".pi" / "agent" / "sessions"
    ]
    configured = Homes(pi_home=tmp_path / "mine", environ={"PI_CODING_AGENT_DIR": "/x"})
    assert [s.home for s in resolve(["pi"], configured)] == [tmp_path / "mine/agent/sessions"]


# -- OpenCode: where ----------------------------------------------------------------------------
def test_opencode_database_names_follow_opencode(tmp_path: Path) -> None:
    data = tmp_path / "share" / "opencode"
    data.mkdir(parents=True)
    for name in ("opencode.db", "opencode-dev.db", "opencode-dev.db-wal", "other.db"):
        (data / name).write_bytes(b"")
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "share")}
    assert default_opencode_dbs(env, "linux") == [data / "opencode.db", data / "opencode-dev.db"]
    no_channels = {**env, "OPENCODE_DISABLE_CHANNEL_DB": "true"}
    assert default_opencode_dbs(no_channels, "linux") == [data / "opencode.db"]
    assert default_opencode_dbs({**env, "OPENCODE_DB": "/srv/oc.db"}, "linux") == [
        Path("/srv/oc.db")
    ]
    assert default_opencode_dbs({**env, "OPENCODE_DB": "work.db"}, "linux") == [data / "work.db"]
    assert default_opencode_dbs({**env, "OPENCODE_DB": ":memory:"}, "linux") == []
    # opencode's data folder is XDG's on Windows too; %LOCALAPPDATA% is looked at as well.
    windows = {"HOME": "C:/Users/u", "LOCALAPPDATA": "C:/Users/u/AppData/Local"}
    assert default_opencode_dbs(windows, "win32")[0] == Path(
        "C:/Users/u/.local/share/opencode/opencode.db"
    )
    assert Path("C:/Users/u/AppData/Local/opencode/opencode.db") in default_opencode_dbs(
        windows, "win32"
    )


def _opencode_db(path: Path, cwd: Path, session_id: str, turns: list[Turn]) -> None:
    conn = wal_database(path, OPENCODE_SCHEMA)
    store_opencode_sessions(
        conn, [StoredSession(cwd=str(cwd), session_id=session_id, start=T0, turns=turns)]
    )
    conn.close()


def test_opencode_sessions_in_a_channel_or_chosen_database_are_read(
    tmp_path: Path, project: Path
) -> None:
    data = tmp_path / "share" / "opencode"
    _opencode_db(data / "opencode.db", project, "ses_latest", [Turn(user="Add the latest test")])
    _opencode_db(data / "opencode-dev.db", project, "ses_dev", [Turn(user="Add the dev test")])
    chosen = tmp_path / "chosen.db"
    _opencode_db(chosen, project, "ses_chosen", [Turn(user="Add the chosen db test")])
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "share")}
    assert _asks(SourceKind.OPENCODE, Homes(environ=env), project) == {
        "Add the latest test",
        "Add the dev test",
    }
    moved = Homes(environ={**env, "OPENCODE_DB": str(chosen)})
    assert _asks(SourceKind.OPENCODE, moved, project) == {"Add the chosen db test"}
    auto = {s.home for s in resolve(["auto"], Homes(environ=env))}
    assert {data / "opencode.db", data / "opencode-dev.db"} <= auto


# -- OpenCode: what -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("stored", "meant"),
    [
        ('"Add the orders migration"', "Add the orders migration"),
        ('"no, keep it to three bullets"', "no, keep it to three bullets"),
        ('"rename \\"foo bar\\" to baz"', 'rename "foo bar" to baz'),
        ("Add the orders migration", "Add the orders migration"),  # typed in the TUI
        ('"draft" and "final" should match', '"draft" and "final" should match'),
        ('"yes"', '"yes"'),  # no space: opencode run never quotes it
        ('"the "real" one"', '"the "real" one"'),  # an inner quote opencode would escape
        ('"fix the bug" now', '"fix the bug" now'),  # not one argument: left as written
    ],
)
def test_only_what_opencode_run_quoted_is_unquoted(stored: str, meant: str) -> None:
    assert unquote_run_message(stored) == meant


def test_opencode_run_sessions_read_as_the_user_typed_them(tmp_path: Path, project: Path) -> None:
    db = tmp_path / "opencode.db"
    turns = [
        Turn(user='"Add the orders migration"', answer="Added."),
        Turn(user='"no, that\'s wrong: keep the old index"', answer="Fixed."),
    ]
    _opencode_db(db, project, "ses_run", turns)
    spec = SourceSpec(kind=SourceKind.OPENCODE, home=db)
    (digest,) = harvest([spec], since=None, project=project, limit=5).digests
    assert digest.user_intents == (
        "Add the orders migration",
        "no, that's wrong: keep the old index",
    )
    assert "neg:no" in [s.label() for s in digest.feedback]
