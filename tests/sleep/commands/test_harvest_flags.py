"""`--lookback-hours`, `--max-sessions`, `--max-tasks` on `once` and `harvest`,
`harvest --scope all`, and which sources `sources.kinds` (``auto`` included) reads."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from skillopt.errors import ConfigError
from skillopt_sleep.cli import build_parser, main
from skillopt_sleep.commands._common import load_config
from skillopt_sleep.config import SleepConfig, load_sleep_config
from skillopt_sleep.harvest import SourceKind
from skillopt_sleep.harvest.locations import Homes, default_vscode_user_dirs, resolve
from skillopt_sleep.night.gather_tasks import sources_for
from skillopt_sleep.state import project_dir
from skillopt_sleep.tasks.archive import archive_path
from support.agent_sessions import write_copilot_cli_session
from support.sleep_setup import MOCK_POOL
from support.transcripts import Turn, write_claude_session

NOW = datetime.now(UTC)


@pytest.fixture
def env(tmp_path: Path) -> tuple[str, Path, Path]:
    """Five week-old sessions in the project, one in another project, one recent there."""
    claude, copilot = tmp_path / "claude", tmp_path / "copilot"
    project, other = tmp_path / "proj", tmp_path / "other"
    project.mkdir()
    other.mkdir()
    for i in range(5):
        write_claude_session(
            claude,
            cwd=project,
            session_id=f"old{i}",
            start=NOW - timedelta(days=7, hours=i),
            turns=[Turn(user=f"Week-old request number {i} about the parser")],
        )
    write_copilot_cli_session(
        copilot,
        cwd=other,
        start=NOW - timedelta(hours=2),
        turns=[Turn(user="Tidy the other project's README")],
    )
    config = tmp_path / "sleep.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\n[sources]\nkinds = ["claude_code", "copilot_cli"]\n'
        f'claude_home = "{claude}"\ncopilot_cli_home = "{copilot}"\n{MOCK_POOL}',
        encoding="utf-8",
    )
    return str(config), project, other


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_harvest_window_and_caps_from_flags(
    env: tuple[str, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, project, _ = env
    base = ("harvest", "--config", config, "--project", str(project), "--no-llm")
    code, default = _json(capsys, *base)
    assert code == 0 and default["n_sessions"] == 0 and default["outside_window"] == 5
    code, wide = _json(capsys, *base, "--lookback-hours", "240")
    assert wide["n_sessions"] == 5 and len(wide["tasks"]) == 5
    code, capped = _json(capsys, *base, "--lookback-hours", "0", "--max-sessions", "2")
    assert capped["n_sessions"] == 2 and capped["backlog"] == 3
    code, few = _json(capsys, *base, "--lookback-hours", "0", "--max-tasks", "3")
    assert len(few["tasks"]) == 3
    assert "2 of 5 mined task(s) are archived for later nights (night.max_tasks)" in few["notes"]
    code, refused = _json(capsys, *base, "--max-tasks", "0")
    assert code == 2 and "night.max_tasks" in refused["message"]


def test_lookback_hours_overrides_a_fixed_window(tmp_path: Path) -> None:
    """Once a window is fixed, sources.lookback_hours no longer moves it; the flag does."""
    from skillopt_sleep.tasks.archive import open_archive

    with open_archive(tmp_path / "archive.db", now=NOW) as archive:
        archive.set_window_start(NOW - timedelta(days=1))
        fixed = archive.harvest_window(lookback_hours=240, now=NOW)
        rolling = archive.harvest_window(lookback_hours=240, now=NOW, rolling=True)
        everything = archive.harvest_window(lookback_hours=0, now=NOW, rolling=True)
    assert fixed.start == NOW - timedelta(days=1) and fixed.fixed
    assert rolling.start == NOW - timedelta(hours=240) and not rolling.fixed
    assert everything.start is None


def test_one_rule_for_a_moving_window() -> None:
    """The archive's unfixed window and the every-project preview both use this rule."""
    from skillopt_sleep.tasks.records import HarvestWindow

    week = HarvestWindow.moving(168, NOW)
    assert (week.start, week.fixed, week.lookback_hours) == (NOW - timedelta(days=7), False, 168)
    assert HarvestWindow.moving(0, NOW).start is None  # 0 = all history


@pytest.mark.parametrize("command", ["once", "dry-run", "harvest"])
def test_the_flags_reach_the_config(command: str, env: tuple[str, Path, Path]) -> None:
    config, project, _ = env
    args = build_parser().parse_args(
        [
            command,
            "--config",
            config,
            "--project",
            str(project),
            "--lookback-hours",
            "12",
            "--max-sessions",
            "9",
            "--max-tasks",
            "4",
        ]
    )
    cfg, _ = load_config(args)
    assert cfg.sources.lookback_hours == 12 and cfg.sources.rolling_window
    assert (cfg.sources.max_sessions, cfg.night.max_tasks) == (9, 4)
    plain, _ = load_config(build_parser().parse_args([command, "--config", config]))
    assert plain.sources.lookback_hours == 72 and not plain.sources.rolling_window


def test_scope_all_previews_every_project_and_records_nothing(
    env: tuple[str, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, project, other = env
    code, preview = _json(
        capsys, "harvest", "--config", config, "--scope", "all", "--lookback-hours", "0"
    )
    assert code == 0 and preview["scope"] == "all" and preview["n_sessions"] == 6
    by_project = {p["project"]: p for p in preview["projects"]}
    assert set(by_project) == {str(project.resolve()), str(other.resolve())}
    assert by_project[str(project.resolve())]["n_sessions"] == 5
    (task,) = by_project[str(other.resolve())]["tasks"]
    assert task["intent"] == "Tidy the other project's README" and task["project"] == str(
        other.resolve()
    )
    code, recent = _json(capsys, "harvest", "--config", config, "--scope", "all")
    assert [p["project"] for p in recent["projects"]] == [str(other.resolve())]
    cfg = load_sleep_config(Path(config))
    assert not archive_path(project_dir(cfg.state_path(), project)).exists()
    code, refused = _json(
        capsys,
        "harvest",
        "--config",
        config,
        "--scope",
        "all",
        "--output",
        str(project / "tasks.json"),
    )
    assert code == 2 and "cannot take --output" in refused["message"]
    assert not (project / "tasks.json").exists()


# -- sources.kinds ---------------------------------------------------------------------------
def test_every_agent_is_a_source_kind() -> None:
    names = ["claude_code", "codex", "copilot", "copilot_cli", "cursor", "pi", "opencode", "auto"]
    cfg = SleepConfig.model_validate({"sources": {"kinds": names}})
    assert cfg.sources.kinds == names
    with pytest.raises(ValueError, match="kinds"):
        SleepConfig.model_validate({"sources": {"kinds": ["windsurf"]}})


def test_a_config_file_names_the_new_sources(tmp_path: Path) -> None:
    config = tmp_path / "sleep.toml"
    config.write_text(
        '[sources]\nkinds = ["pi", "opencode", "copilot"]\npi_home = "/data/pi"\n'
        'opencode_db = "/data/oc/opencode.db"\nvscode_user_dirs = ["/data/Code/User"]\n',
        encoding="utf-8",
    )
    specs = sources_for(load_sleep_config(config))
    assert [(s.kind, str(s.home)) for s in specs] == [
        (SourceKind.PI, "/data/pi/agent/sessions"),
        (SourceKind.OPENCODE, "/data/oc/opencode.db"),
        (SourceKind.COPILOT, "/data/Code/User"),
    ]
    config.write_text('[sources]\nkinds = ["copilot_cli"]\ncopilot_cli_home = 3\n')
    with pytest.raises(ConfigError):
        load_sleep_config(config)


@pytest.mark.parametrize(
    ("written", "kinds"),
    [('"auto"', ["auto"]), ('"claude_code, codex"', ["claude_code", "codex"])],
)
def test_kinds_may_be_one_name_or_a_comma_list(
    tmp_path: Path, written: str, kinds: list[str]
) -> None:
    config = tmp_path / "sleep.toml"
    config.write_text(f"[sources]\nkinds = {written}\n", encoding="utf-8")
    assert load_sleep_config(config).sources.kinds == kinds
    config.write_text('[sources]\nkinds = "claude"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="'claude_code'"):  # a wrong name lists the right ones
        load_sleep_config(config)


def test_auto_reads_every_agent_present_on_the_machine(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude" / "projects").mkdir(parents=True)
    (home / ".pi" / "agent" / "sessions").mkdir(parents=True)
    (home / ".copilot").mkdir()  # installed, but no session yet: not a source
    (home / ".config" / "VSCodium" / "User" / "workspaceStorage").mkdir(parents=True)
    (home / ".local" / "share" / "opencode").mkdir(parents=True)
    (home / ".local" / "share" / "opencode" / "opencode.db").write_bytes(b"")
    homes = Homes(environ={"HOME": str(home)})
    found = {(s.kind, s.home) for s in resolve(["auto"], homes)}
    assert found == {
        (SourceKind.CLAUDE_CODE, home / ".claude"),
        (SourceKind.PI, home / ".pi" / "agent" / "sessions"),
        (SourceKind.COPILOT, home / ".config" / "VSCodium" / "User"),
        (SourceKind.OPENCODE, home / ".local" / "share" / "opencode" / "opencode.db"),
    }
    both = resolve(["claude_code", "auto"], homes)
    assert [s.kind for s in both].count(SourceKind.CLAUDE_CODE) == 1
    elsewhere = Homes(environ={"HOME": str(home), "XDG_DATA_HOME": str(tmp_path / "xdg")})
    assert SourceKind.OPENCODE not in {s.kind for s in resolve(["auto"], elsewhere)}


def test_vscode_user_folders_per_platform(tmp_path: Path) -> None:
    env = {"HOME": "/home/u", "APPDATA": "C:/Users/u/AppData/Roaming", "VSCODE_PORTABLE": "/p"}
    linux = default_vscode_user_dirs(env, "linux")
    assert Path("/home/u/.config/Code - Insiders/User") in linux
    assert Path("/p/user-data/User") in linux and Path("/home/u/.vscode-server/data/User") in linux
    mac = default_vscode_user_dirs(env, "darwin")
    assert Path("/home/u/Library/Application Support/Cursor/User") in mac
    assert Path("C:/Users/u/AppData/Roaming/VSCodium/User") in default_vscode_user_dirs(
        env, "win32"
    )


def test_a_night_over_database_sessions_commits_each_one(tmp_path: Path) -> None:
    """Sessions kept in one database file are harvested, mined and recorded one by one."""
    import sqlite3

    import anyio

    from skillopt_sleep.night.gather_tasks import commit_gathered, gather_night
    from skillopt_sleep.tasks.archive import open_archive
    from support.agent_sessions import OPENCODE_SCHEMA, StoredSession, store_opencode_sessions

    project, db = tmp_path / "proj", tmp_path / "opencode.db"
    project.mkdir()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.executescript(OPENCODE_SCHEMA)
    store_opencode_sessions(conn, [
        StoredSession(cwd=str(project), session_id=f"ses_{i}", start=NOW - timedelta(hours=i + 1),
                      turns=[Turn(user=f"Add the audit column number {i}")])
        for i in range(2)
    ])  # fmt: skip
    conn.close()
    cfg = SleepConfig.model_validate(
        {"state_dir": str(tmp_path / "state"),
         "sources": {"kinds": ["opencode"], "opencode_db": str(db)}}
    )  # fmt: skip

    async def night(n: int) -> int:
        with open_archive(tmp_path / "archive.db", now=NOW) as archive:
            got = await gather_night(
                cfg, project=project, archive=archive, pool=None, use_llm=False, now=NOW
            )
            commit_gathered(archive, got, night=n, now=NOW)
            assert set(got.digest_keys) == {f"{db}#ses_0", f"{db}#ses_1"} or not got.new_tasks
            return len(got.new_tasks)

    assert anyio.run(night, 1) == 2
    assert anyio.run(night, 2) == 0  # both recorded as harvested
