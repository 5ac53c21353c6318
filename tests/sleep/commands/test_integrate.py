"""`skillopt-sleep integrate`: print, or write through the agents' own `mcp add` commands."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from skillopt_sleep.cli import main
from support.real_cli import find_cli


def test_prints_the_registration_without_touching_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    project = tmp_path / "proj"
    project.mkdir()
    assert main(["integrate", "claude", "--project", str(project)]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    words = shlex.split(line)
    assert words[:6] == ["claude", "mcp", "add", "--scope", "local", "skillopt-sleep"]
    assert words[6] == "--" and words[8:] == ["mcp", "--project", str(project)]
    assert Path(words[7]).name == "skillopt-sleep" or words[7:10][1:] == ["-m", "skillopt_sleep"]
    assert main(["integrate", "codex", "--json", "--project", str(project)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["command"][:4] == ["codex", "mcp", "add", "skillopt-sleep"]
    assert "--project" not in data["command"]  # user-wide: serves the agent's own folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]  # nothing written


def test_cursor_config_is_merged_and_a_broken_one_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / ".cursor" / "mcp.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"mcpServers": {"other": {"command": "x"}}, "keep": 1}))
    assert main(["integrate", "cursor", "--project", str(tmp_path)]) == 0
    assert '+    "skillopt-sleep": {' in capsys.readouterr().out
    assert "skillopt-sleep" not in config.read_text()  # shown, not written
    assert main(["integrate", "cursor", "--project", str(tmp_path), "--write"]) == 0
    data = json.loads(config.read_text())
    assert data["keep"] == 1 and data["mcpServers"]["other"] == {"command": "x"}
    entry = data["mcpServers"]["skillopt-sleep"]
    assert entry["args"][:1] == ["mcp"] or entry["args"][:3] == ["-m", "skillopt_sleep", "mcp"]
    assert entry["args"][-2:] == ["--project", str(tmp_path)]
    config.write_text("{not json")
    assert main(["integrate", "cursor", "--project", str(tmp_path), "--write"]) == 2
    assert config.read_text() == "{not json"


@pytest.mark.realcli
@pytest.mark.parametrize("agent", ["claude", "codex", "copilot"])
def test_write_registers_with_the_real_agent_cli(
    agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    cli = find_cli(agent)
    if cli is None:
        pytest.skip(f"{agent} CLI not installed (make tools)")
    home = tmp_path / "home"
    project = home / "code" / "proj"  # codex refuses helper links under a temp dir's root
    project.mkdir(parents=True)
    # Claude Code files a local-scope server under the nearest folder holding `.git`; a user's
    # project is a repository, and a stray /tmp/.git (which codex's sandbox can leave behind
    # when killed) must not move the entry.
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", f"{Path(cli).parent}{os.pathsep}{os.environ['PATH']}")
    for var in ("CODEX_HOME", "CLAUDE_CONFIG_DIR", "COPILOT_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    assert main(["integrate", agent, "--project", str(project), "--write"]) == 0, (
        capsys.readouterr()
    )
    if agent == "codex":
        text = (home / ".codex" / "config.toml").read_text()
        assert "[mcp_servers.skillopt-sleep]" in text and '"mcp"' in text
    elif agent == "copilot":
        entry = json.loads((home / ".copilot" / "mcp-config.json").read_text())
        assert entry["mcpServers"]["skillopt-sleep"]["args"][-1] == "mcp"
    else:
        data = json.loads((home / ".claude.json").read_text())
        entry = data["projects"][str(project)]["mcpServers"]["skillopt-sleep"]
        assert entry["args"][-3:] == ["mcp", "--project", str(project)]
