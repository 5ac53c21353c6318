"""A new user's first night reaches their agent: example config, fresh HOME, night, adopt.

The night runs against the world model behind a loopback HTTP server; the adopted files
are then read by the genuine ``claude`` and ``codex`` CLIs (from ``make tools``) talking to
a loopback fake server, to see the skill listed and the memory file read. Those two tests
are skipped, with the reason, when the CLI is not installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path

import pytest

from skillopt.backends.cli.claude import QUIET_ENV
from skillopt.skilldoc import learned_bullets
from skillopt_sleep.cli import main
from skillopt_sleep.config import managed_skill_name
from skillopt_sleep.staging import load_manifest, skill_description
from support.fake_agent_server import FakeAgentServer
from support.fake_model_server import FakeModelServer
from support.netns import private_network
from support.real_cli import TOOLS_BIN, find_cli
from support.transcripts import Turn, write_claude_session
from support.world_http import world_reply

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "sleep.example.toml"
EXAMPLE_URL = 'base_url = "https://api.openai.com/v1"'


@dataclass(frozen=True, slots=True, kw_only=True)
class FirstNight:
    home: Path
    project: Path
    skill: Path
    memory: Path
    run_dir: Path


def example_config(base_url: str, *, memory: str) -> str:
    """The shipped example, changed only where it must be: the endpoint (and memory file)."""
    text = EXAMPLE.read_text(encoding="utf-8")
    assert EXAMPLE_URL in text
    text = text.replace(EXAMPLE_URL, f'base_url = "{base_url}"')
    if memory != "CLAUDE.md":
        (line,) = [ln for ln in text.splitlines() if ln.startswith("# memory_path")]
        text = text.replace(line, f'memory_path = "{memory}"')
    return text


def write_demo_sessions(claude_home: Path, project: Path) -> None:
    """The bundled demo's sessions, as this user's last hours of Claude Code work."""
    data = resources.files("skillopt_sleep.demo").joinpath("sessions.json").read_text()
    sessions = json.loads(data)["sessions"]
    start = datetime.now(UTC) - timedelta(hours=len(sessions) + 1)
    for index, session in enumerate(sessions):
        write_claude_session(
            claude_home,
            cwd=project,
            turns=[Turn(user=u, answer=session["answer"]) for u in session["user"]],
            start=start + timedelta(hours=index),
        )


def first_night(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *,
    memory: str = "CLAUDE.md",
) -> FirstNight:
    """``once`` then ``adopt`` as a new user would run them, in the project, on a fresh HOME."""
    home = tmp_path / "home"
    project = tmp_path / "my-app"
    project.mkdir()
    write_demo_sessions(home / ".claude", project)
    config = home / ".config" / "skillopt" / "sleep.toml"
    config.parent.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", "test-key-not-secret")
    monkeypatch.chdir(project)
    with FakeModelServer(reply_fn=world_reply) as server:
        config.write_text(example_config(server.url("main"), memory=memory), encoding="utf-8")
        code = main(["once", "--json"])
    night = json.loads(capsys.readouterr().out)
    assert code == 0 and night["result"] == "accepted", night
    skill = home / ".claude" / "skills" / managed_skill_name(project) / "SKILL.md"
    assert not skill.parent.exists()  # a first night: the managed skill has no folder yet
    code = main(["adopt", "--json"])
    adopted = json.loads(capsys.readouterr().out)
    assert code == 0 and adopted["ok"], adopted
    assert {a["kind"] for a in adopted["adopted"]} == {"skill", "memory"}
    return FirstNight(
        home=home,
        project=project,
        skill=skill,
        memory=project / memory,
        run_dir=Path(night["run_dir"]),
    )


def front_matter(text: str) -> dict[str, str]:
    assert text.startswith("---\n"), text[:80]
    block = text[4 : text.index("\n---\n")]
    return dict(line.split(": ", 1) for line in block.splitlines())


@pytest.mark.slow
@pytest.mark.parametrize("memory", ["CLAUDE.md", "AGENTS.md"])
def test_first_night_adopts_a_listable_skill_and_the_memory(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    memory: str,
) -> None:
    done = first_night(tmp_path, monkeypatch, capsys, memory=memory)
    text = done.skill.read_text(encoding="utf-8")
    assert front_matter(text) == {
        "name": managed_skill_name(done.project),
        "description": skill_description(done.project),
    }
    assert "my-app" in skill_description(done.project)
    assert learned_bullets(text)
    # The proposal already held the scaffold: what adopt wrote is what the sha pinned.
    entry = next(e for e in load_manifest(done.run_dir).entries if e.kind.value == "skill")
    assert (done.run_dir / entry.proposed_file).read_bytes() == done.skill.read_bytes()
    assert learned_bullets(done.memory.read_text(encoding="utf-8"))
    assert sorted(p.name for p in done.skill.parent.iterdir()) == ["SKILL.md"]


def _real_cli(name: str) -> str:
    found = find_cli(name)
    if found is None:
        pytest.skip(f"{name} CLI not installed (run `make tools`; needs npm)")
    if name != "claude" and shutil.which("node") is None:
        pytest.skip(f"{name} CLI needs node on PATH")
    return found


AgentCommand = Callable[[str], tuple[list[str], dict[str, str]]]


def agent_after_first_night(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *,
    memory: str,
    command: AgentCommand,
) -> tuple[FirstNight, list[str]]:
    """First night and adoption, then one agent call (``command(server_url)`` gives its argv
    and environment) in the project, all on loopback only; returns the request bodies."""
    with private_network(), FakeAgentServer() as agent:
        done = first_night(tmp_path, monkeypatch, capsys, memory=memory)
        argv, extra = command(agent.base_url)
        proc = subprocess.run(
            argv,
            env={
                "PATH": f"{TOOLS_BIN}:/usr/local/bin:/usr/bin:/bin",
                "HOME": str(done.home),
                "LANG": "C.UTF-8",
                **extra,
            },
            cwd=done.project,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,  # ~1 s expected; only a hung CLI gets near this
        )
        sent = [json.dumps(r.body, ensure_ascii=False) for r in agent.requests]
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return done, sent


@pytest.mark.realcli
@pytest.mark.slow
def test_claude_code_lists_the_adopted_skill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    claude = _real_cli("claude")

    def command(url: str) -> tuple[list[str], dict[str, str]]:
        env = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "dummy-key", **QUIET_ENV}
        return [claude, "-p", "FAKE_REPLY[ok]", "--model", "fake-model"], env

    done, sent = agent_after_first_night(
        tmp_path, monkeypatch, capsys, memory="CLAUDE.md", command=command
    )
    listing = f"- {managed_skill_name(done.project)}: {skill_description(done.project)}"
    assert any(listing in body for body in sent), "the adopted skill is not in the listing"
    bullet = learned_bullets(done.memory.read_text(encoding="utf-8"))[0]
    assert any(bullet in body for body in sent), "the adopted CLAUDE.md was not read"


@pytest.mark.realcli
@pytest.mark.slow
def test_codex_reads_the_adopted_agents_md(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    codex = _real_cli("codex")

    def command(url: str) -> tuple[list[str], dict[str, str]]:
        provider = "model_providers.fake"
        settings = [
            "analytics.enabled=false",
            "model_provider=fake",
            f"{provider}.name=fake",
            f"{provider}.base_url={url}/v1",
            f"{provider}.wire_api=responses",
            f"{provider}.env_key=FAKE_LLM_KEY",
            f"{provider}.request_max_retries=0",
            f"{provider}.stream_max_retries=0",
        ]
        argv = [codex, "exec", "--skip-git-repo-check", "--ephemeral", "--json"]
        argv += ["--sandbox", "read-only", "-m", "fake-model"]
        for setting in settings:
            argv += ["-c", setting]
        return [*argv, "FAKE_REPLY[ok]"], {"FAKE_LLM_KEY": "dummy-key"}

    done, sent = agent_after_first_night(
        tmp_path, monkeypatch, capsys, memory="AGENTS.md", command=command
    )
    bullet = learned_bullets(done.memory.read_text(encoding="utf-8"))[0]
    heading = f"# AGENTS.md instructions for {done.project}"
    assert any(heading in body and bullet in body for body in sent), "AGENTS.md was not read"
