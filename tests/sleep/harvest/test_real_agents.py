"""Harvest sessions the genuine agent CLIs wrote themselves.

Claude Code, Codex and Copilot CLI (``make tools``) run against the loopback fake model
server with session persistence on (as a user runs them), in a private network namespace
where permitted. Each records a two-turn session in a project subdirectory (the follow-up
resumes the same session and carries a secret), a replay session of ours, and a session
started in a folder above the project. The harvest of those files must give exactly the
user's two messages (no copy of the prompt from the CLI's bookkeeping records), the skill
the session loaded, redacted secrets, and only the project's sessions.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from skillopt_sleep.harvest import SELF_MARKER, SourceKind, SourceSpec, harvest
from support.fake_agent_server import FakeAgentServer
from support.netns import private_network
from support.real_cli import TOOLS_BIN, find_cli

pytestmark = [pytest.mark.realcli, pytest.mark.slow]

SECRET = "ghp_" + "Q1w2E3r4T5y6U7i8O9p0" * 2
SKILL = "release-notes"
SKILL_BODY = f"---\nname: {SKILL}\ndescription: Write release notes\n---\n\nUse bullets.\n"
FIRST = "Write the release notes for version 2.0"
FOLLOW_UP = "no, keep it to three bullets"
TIMEOUT = 180


@pytest.fixture(scope="module")
def server() -> Iterator[FakeAgentServer]:
    with private_network() as (entered, why):
        if not entered:
            print(f"\nreal-CLI harvest runs in the current namespace (loopback only): {why}")
        with FakeAgentServer() as fake:
            yield fake


@dataclass
class Places:
    root: Path
    ancestor: Path
    project: Path
    subdir: Path
    sibling: Path


@pytest.fixture
def places(tmp_path: Path) -> Places:
    ancestor = tmp_path / "work"
    project = ancestor / "proj"
    found = Places(tmp_path, ancestor, project, project / "pkg", ancestor / "proj-old")
    for folder in (found.subdir, found.sibling):
        folder.mkdir(parents=True)
    for skills in (".claude/skills", ".github/skills", ".agents/skills"):
        skill = project / skills / SKILL / "SKILL.md"
        skill.parent.mkdir(parents=True)
        skill.write_text(SKILL_BODY, encoding="utf-8")
    return found


def _base_env(home: Path) -> dict[str, str]:
    (home / "user").mkdir(parents=True, exist_ok=True)
    return {
        "PATH": f"{TOOLS_BIN}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home / "user"),
        "LANG": "C.UTF-8",
        "FAKE_LLM_KEY": "dummy-key",
    }


def _run(argv: list[str], *, cwd: Path, env: dict[str, str], stdin: str = "") -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, f"{argv[0]} failed: {done.stderr[-2000:]}"
    return done.stdout


def _json_lines(text: str) -> Iterator[dict[str, object]]:
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            yield value


class Claude:
    kind = SourceKind.CLAUDE_CODE

    def __init__(self, url: str, home: Path) -> None:
        self.home = home / "config"
        self.env = {
            **_base_env(home),
            "CLAUDE_CONFIG_DIR": str(self.home),
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_API_KEY": "dummy-key",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_MAX_RETRIES": "0",
        }

    def say(self, prompt: str, cwd: Path, resume: str = "") -> str:
        argv = [str(find_cli("claude")), "-p", "--output-format", "json", "--model", "fake-model"]
        argv += ["--resume", resume] if resume else []
        out = json.loads(_run(argv, cwd=cwd, env=self.env, stdin=prompt))
        return str(out["session_id"])

    @staticmethod
    def skill_directive() -> str:
        return f"FAKE_SKILL[{SKILL}]"


class Codex:
    kind = SourceKind.CODEX

    def __init__(self, url: str, home: Path) -> None:
        self.home = home / "codex"
        self.home.mkdir(parents=True, exist_ok=True)  # codex refuses a CODEX_HOME that is not there
        self.env = {**_base_env(home), "CODEX_HOME": str(self.home)}
        provider = "fake"
        self.options = ["--skip-git-repo-check", "--color", "never", "--json", "-m", "fake-model"]
        for setting in (
            "analytics.enabled=false",
            f"model_provider={provider}",
            f"model_providers.{provider}.name={provider}",
            f"model_providers.{provider}.base_url={url}/v1",
            f"model_providers.{provider}.wire_api=responses",
            f"model_providers.{provider}.env_key=FAKE_LLM_KEY",
            f"model_providers.{provider}.request_max_retries=0",
            f"model_providers.{provider}.stream_max_retries=0",
        ):
            self.options += ["-c", setting]

    def say(self, prompt: str, cwd: Path, resume: str = "") -> str:
        argv = [str(find_cli("codex")), "exec", *self.options, "--disable", "plugins"]
        argv += ["resume", resume, "-"] if resume else ["-"]
        out = _run(argv, cwd=cwd, env=self.env, stdin=prompt)
        started = [e for e in _json_lines(out) if e.get("type") == "thread.started"]
        return str(started[0]["thread_id"]) if started else resume

    @staticmethod
    def skill_directive() -> str:  # Codex has no skill tool: it reads the file
        return f"FAKE_TOOL[cat ../.agents/skills/{SKILL}/SKILL.md]"


class Copilot:
    kind = SourceKind.COPILOT_CLI

    def __init__(self, url: str, home: Path) -> None:
        self.home = home / "copilot"
        self.env = {
            **_base_env(home),
            "COPILOT_HOME": str(self.home),
            "COPILOT_AUTO_UPDATE": "false",
            "COPILOT_OFFLINE": "true",
            "COPILOT_PROVIDER_BASE_URL": f"{url}/v1",
            "COPILOT_PROVIDER_API_KEY": "dummy-key",
            "COPILOT_MODEL": "fake-model",
        }
        self.options = [
            "-s",
            "--output-format",
            "json",
            "--stream",
            "off",
            "--no-color",
            "--no-auto-update",
            "--disable-builtin-mcps",
            "--model",
            "fake-model",
            "--allow-all-tools",
        ]

    def say(self, prompt: str, cwd: Path, resume: str = "") -> str:
        argv = [str(find_cli("copilot")), *self.options]
        if resume:
            out = _run([*argv, "--resume", resume, "-p", prompt], cwd=cwd, env=self.env)
        else:
            out = _run(argv, cwd=cwd, env=self.env, stdin=prompt)
        ids = [e["sessionId"] for e in _json_lines(out) if e.get("type") == "result"]
        return str(ids[-1]) if ids else resume

    @staticmethod
    def skill_directive() -> str:
        return f"FAKE_SKILL[{SKILL}]"


AGENTS = {"claude": Claude, "codex": Codex, "copilot": Copilot}


@pytest.fixture(params=list(AGENTS))
def agent(
    request: pytest.FixtureRequest, server: FakeAgentServer, places: Places
) -> Claude | Codex | Copilot:
    name: str = request.param
    if find_cli(name) is None:
        pytest.skip(f"{name} CLI not installed (run `make tools`; needs npm)")
    if shutil.which("node") is None and name != "claude":
        pytest.skip(f"{name} CLI needs node on PATH")
    return AGENTS[name](server.base_url, places.root / "homes")  # type: ignore[return-value]


def _record(agent: Claude | Codex | Copilot, places: Places) -> str:
    """The user's session (resumed for a follow-up), ours, and one above the project."""
    first = f"{FIRST} {agent.skill_directive()} FAKE_REPLY[Five bullets]"
    session = agent.say(first, places.subdir)
    again = agent.say(
        f"{FOLLOW_UP} token={SECRET} FAKE_REPLY[Three bullets]", places.subdir, resume=session
    )
    assert again == session, "the follow-up must continue the same session"
    agent.say(f"{SELF_MARKER}\nReplay task: list the risks FAKE_REPLY[ok]", places.project)
    agent.say("Clean up the home folder FAKE_REPLY[done]", places.ancestor)
    return session


def test_sessions_written_by_the_real_cli(agent: Claude | Codex | Copilot, places: Places) -> None:
    session = _record(agent, places)
    spec = SourceSpec(kind=agent.kind, home=agent.home)

    result = harvest([spec], since=None, project=places.project, limit=20)
    (digest,) = result.digests
    assert digest.session_id == session
    assert digest.cwd == places.subdir.resolve()
    assert digest.user_intents[0] == f"{FIRST} {agent.skill_directive()} FAKE_REPLY[Five bullets]"
    assert digest.user_intents[1:] == (
        f"{FOLLOW_UP} token=[REDACTED:github_token] FAKE_REPLY[Three bullets]",
    )
    assert digest.n_user_turns == 2 and digest.n_assistant_turns >= 2
    assert digest.assistant_finals[-1] == "Three bullets"
    assert digest.skill_hint == SKILL
    assert "neg:no" in [s.label() for s in digest.feedback]
    assert SECRET not in repr(digest.to_dict())
    assert result.diagnostics.dropped.get("self_generated") == 1

    everything = harvest([spec], since=None, project=None, limit=20)
    assert sorted(d.cwd for d in everything.digests if d.cwd) == sorted(
        [places.ancestor.resolve(), places.subdir.resolve()]
    )
    assert harvest([spec], since=None, project=places.sibling, limit=20).digests == ()

    visited = frozenset(result.visited) | frozenset(
        harvest([spec], since=None, project=places.project, limit=20, harvested=frozenset()).visited
    )
    again = harvest([spec], since=None, project=places.project, limit=20, harvested=visited)
    assert again.digests == ()


def test_copilot_cli_store_alone_is_lossy_but_read(server: FakeAgentServer, places: Places) -> None:
    if find_cli("copilot") is None or shutil.which("node") is None:
        pytest.skip("copilot CLI not installed (run `make tools`; needs npm and node)")
    agent = Copilot(server.base_url, places.root / "homes")
    session = _record(agent, places)
    shutil.rmtree(agent.home / "session-state" / session)  # the event log is gone
    assert (agent.home / "session-store.db").exists()
    spec = SourceSpec(kind=SourceKind.COPILOT_CLI, home=agent.home)
    # the data files stay untouched (the -shm is SQLite's shared lock table: readers use it)
    files = [agent.home / "session-store.db", agent.home / "session-store.db-wal"]
    before = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    (digest,) = harvest([spec], since=None, project=places.project, limit=20).digests
    assert [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files] == before
    assert digest.session_id == session
    assert digest.path == agent.home / f"session-store.db#{session}"
    # The store restarts turn_index when a session is resumed: the follow-up overwrote turn 0.
    assert digest.user_intents[-1].startswith(FOLLOW_UP) and len(digest.user_intents) <= 2
    assert SECRET not in repr(digest.to_dict())
