"""The agent plugin with the genuine CLIs (`make tools`) against the loopback fake server:
Claude Code loads it, lists its commands, connects its MCP server, expands a command and
fires its SessionEnd hook, whose record the next night reads first; Codex lists the skills
and reads the AGENTS.md block; Copilot sends the instructions block to its model."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from skillopt_sleep.agent_plugin import BLOCK_BEGIN
from skillopt_sleep.cli import main
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.harvest.finished import read_finished
from skillopt_sleep.night.gather_tasks import Gathered, gather_night
from skillopt_sleep.tasks.archive import open_archive
from support.fake_agent_server import FakeAgentServer
from support.real_cli import find_cli, loopback_server
from support.transcripts import Turn, write_claude_session

pytestmark = [pytest.mark.realcli, pytest.mark.slow]
SRC = str(Path(__file__).resolve().parents[3] / "src")


def _cli(name: str) -> str:
    found = find_cli(name)
    if found is None:
        pytest.skip(f"{name} CLI not installed (make tools)")
    return found


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user home (codex refuses helper links directly under a temp dir's root)."""
    user = tmp_path / "home" / "user"
    (user / "code" / "proj").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(user))
    for var in ("CODEX_HOME", "CLAUDE_CONFIG_DIR", "COPILOT_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(var, raising=False)
    yield user


def _environ(cli: str, home: Path, **extra: str) -> dict[str, str]:
    """What the agent runs with; the hook and MCP server it starts import this checkout."""
    path = f"{Path(cli).parent}{os.pathsep}/usr/local/bin:/usr/bin:/bin"
    return {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", "PYTHONPATH": SRC, **extra}


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _claude_env(home: Path, fake: FakeAgentServer) -> dict[str, str]:
    return _environ(
        _cli("claude"), home, ANTHROPIC_BASE_URL=fake.base_url, ANTHROPIC_API_KEY="dummy",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1",
        CLAUDE_CODE_MAX_RETRIES="0",
    )  # fmt: skip


def test_claude_code_loads_the_plugin_and_its_hook_feeds_the_next_night(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = _cli("claude")
    project, state = home / "code" / "proj", home / "state"
    monkeypatch.setenv("PATH", f"{Path(cli).parent}{os.pathsep}{os.environ['PATH']}")
    assert main(["integrate", "claude", "--plugin", "--write", "--state-dir", str(state)]) == 0
    with loopback_server() as fake:
        env = _claude_env(home, fake)
        details = _run([cli, "plugin", "details", "skillopt-sleep"], env, project)
        assert "adopt, handoff, report, status" in details and "SessionEnd" in details
        assert "✔ Connected" in _run([cli, "mcp", "list"], env, project)
        _run([cli, "-p", "/skillopt-sleep:status FAKE_REPLY[done]", "--model", "fake-model"],
             env, project)  # fmt: skip
        assert "Call the `status` tool" in json.dumps(fake.requests[-1].body)
        _run([cli, "-p", "Rename the upload helper module FAKE_REPLY[done]", "--model",
              "fake-model"], env, project)  # fmt: skip
    recorded = read_finished(state)
    assert len(recorded) == 2 and all(r.cwd == str(project) for r in recorded)
    transcript = Path(recorded[-1].transcript)
    assert transcript.is_file() and transcript.parent.parent == home / ".claude" / "projects"

    later = datetime.now(UTC) + timedelta(minutes=5)  # a newer session nobody reported
    write_claude_session(home / ".claude", cwd=project, session_id="newer", start=later,
                         turns=[Turn(user="Draft the release notes for the 2.0 tag")])  # fmt: skip
    cfg = SleepConfig.model_validate({
        "state_dir": str(state),
        "sources": {"kinds": ["claude_code"], "claude_home": str(home / ".claude"),
                    "lookback_hours": 0, "max_sessions": 1},
        "night": {"llm_mine": False},
    })  # fmt: skip
    now = later + timedelta(hours=1)

    async def next_night() -> Gathered:
        with open_archive(state / "tasks.sqlite", now=now) as archive:
            return await gather_night(cfg, project=project, archive=archive, pool=None,
                                      use_llm=False, now=now)  # fmt: skip

    got = anyio.run(next_night)
    assert [s for t in got.new_tasks for s in t.source_sessions] == [transcript.stem]

    assert main(["integrate", "claude", "--plugin", "--remove", "--write"]) == 0
    listed = json.loads(_run([cli, "plugin", "list", "--json"], _environ(cli, home), project))
    assert not [p for p in listed if p["id"].startswith("skillopt-sleep@")]
    assert not (home / ".local" / "share" / "skillopt-sleep").exists()


def test_codex_lists_the_skills_and_reads_the_block(home: Path) -> None:
    cli = _cli("codex")
    assert main(["integrate", "codex", "--plugin", "--write"]) == 0
    seen = _run([cli, "debug", "prompt-input", "hello"], _environ(cli, home), home / "code")
    for name in ("skillopt-status", "skillopt-report", "skillopt-adopt", "skillopt-handoff"):
        assert f"{name}/SKILL.md" in seen
    assert "skillopt-sleep:begin" in seen
    assert main(["integrate", "codex", "--plugin", "--remove", "--write"]) == 0
    seen = _run([cli, "debug", "prompt-input", "hello"], _environ(cli, home), home / "code")
    assert "skillopt-" not in seen


def test_copilot_sends_the_instructions_to_its_model(home: Path) -> None:
    cli = _cli("copilot")
    assert main(["integrate", "copilot", "--plugin", "--write"]) == 0
    with loopback_server() as fake:
        env = _environ(cli, home, COPILOT_OFFLINE="true", COPILOT_PROVIDER_API_KEY="dummy",
                       COPILOT_PROVIDER_BASE_URL=f"{fake.base_url}/v1",
                       COPILOT_MODEL="fake-model", COPILOT_AUTO_UPDATE="false")  # fmt: skip
        _run([cli, "-s", "--no-color", "--no-auto-update", "-p", "hello FAKE_REPLY[done]"],
             env, home / "code" / "proj")  # fmt: skip
        assert BLOCK_BEGIN in json.dumps(fake.requests[-1].body)
