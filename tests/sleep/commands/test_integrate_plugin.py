"""`skillopt-sleep integrate AGENT --plugin [--remove]`: the files it writes and takes out
again, on real files under a temporary home; a user's file is never replaced."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import anyio
import pytest

from skillopt_sleep import agent_plugin as ap
from skillopt_sleep.cli import build_parser, main
from skillopt_sleep.mcp_server import build_server

USER_AGENTS = "# My rules\n\nAlways run the linter.\n"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("CODEX_HOME", "COPILOT_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "no-agents"))  # no agent CLI to run
    return tmp_path


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_codex_skills_and_block_go_in_and_come_out_leaving_the_users_file(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agents = home / ".codex" / "AGENTS.md"
    agents.parent.mkdir()
    agents.write_text(USER_AGENTS)
    assert main(["integrate", "codex", "--plugin"]) == 0
    assert _tree(home / ".codex") == {"AGENTS.md": USER_AGENTS}  # shown, not written
    state = str(home / "state")
    assert main(["integrate", "codex", "--plugin", "--write", "--state-dir", state]) == 0
    skills = sorted(p.parent.name for p in (home / ".codex" / "skills").rglob("SKILL.md"))
    assert skills == ["skillopt-adopt", "skillopt-handoff", "skillopt-report", "skillopt-status"]
    handoff = (home / ".codex" / "skills" / "skillopt-handoff" / "SKILL.md").read_text()
    assert handoff.startswith("---\nname: skillopt-handoff\ndescription: ")
    assert f"once --handoff --state-dir {state}" in handoff and "$ARGUMENTS" not in handoff
    text = agents.read_text()
    assert text.startswith(USER_AGENTS) and text.count(ap.BLOCK_BEGIN) == 1
    capsys.readouterr()
    assert main(["integrate", "codex", "--plugin", "--write", "--state-dir", state]) == 0
    assert "0 file(s) changed" in capsys.readouterr().out  # installing twice changes nothing
    assert main(["integrate", "codex", "--plugin", "--remove", "--write"]) == 0
    assert _tree(home / ".codex") == {"AGENTS.md": USER_AGENTS}


def test_a_users_file_where_ours_would_go_is_refused_and_nothing_changes(home: Path) -> None:
    mine = home / ".codex" / "skills" / "skillopt-status" / "SKILL.md"
    mine.parent.mkdir(parents=True)
    mine.write_text("---\nname: skillopt-status\ndescription: mine\n---\nmine\n")
    before = _tree(home / ".codex")
    assert main(["integrate", "codex", "--plugin", "--write"]) == 2
    assert main(["integrate", "codex", "--plugin", "--remove", "--write"]) == 2
    assert _tree(home / ".codex") == before
    broken = home / ".copilot" / "copilot-instructions.md"
    broken.parent.mkdir()
    broken.write_text(f"mine\n{ap.BLOCK_BEGIN}\nno end\n")
    assert main(["integrate", "copilot", "--plugin", "--write"]) == 2
    assert broken.read_text() == f"mine\n{ap.BLOCK_BEGIN}\nno end\n"
    foreign = home / ".local" / "share" / "skillopt-sleep" / "claude-marketplace"
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("mine")
    assert main(["integrate", "claude", "--plugin", "--json"]) == 2
    assert _tree(foreign) == {"notes.txt": "mine"}


def test_copilot_block_created_and_removed_with_its_file(home: Path) -> None:
    path = home / ".copilot" / "copilot-instructions.md"
    assert main(["integrate", "copilot", "--plugin", "--write"]) == 0
    text = path.read_text()
    assert text.startswith(ap.BLOCK_BEGIN) and "`proposal_diff`" in text and "skills" not in text
    assert main(["integrate", "copilot", "--plugin", "--remove", "--write"]) == 0
    assert not path.exists()  # we created it: removing takes it away


def test_claude_without_its_cli_shows_the_plan_and_writes_nothing(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["integrate", "claude", "--plugin", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    root = home / ".local" / "share" / "skillopt-sleep" / "claude-marketplace"
    files = {str(Path(p).relative_to(root)) for p in plan["files"]}
    assert {".claude-plugin/marketplace.json", "plugins/skillopt-sleep/.mcp.json",
            "plugins/skillopt-sleep/hooks/hooks.json",
            "plugins/skillopt-sleep/commands/adopt.md"} <= files  # fmt: skip
    assert plan["commands"] == [
        ["claude", "plugin", "marketplace", "add", str(root)],
        ["claude", "plugin", "install", "skillopt-sleep@skillopt-sleep-local"],
    ]
    assert main(["integrate", "claude", "--plugin", "--write"]) == 2  # `claude` not on PATH
    assert not root.exists()
    assert main(["integrate", "claude", "--remove"]) == 2  # --remove goes with --plugin


def test_the_rendered_plugin_runs_this_install_with_the_given_flags() -> None:
    program, flags = ["/opt/my venv/bin/skillopt-sleep"], ["--state-dir", "/s"]
    server = [*program, "mcp", *flags]
    files = ap.claude_marketplace(server, program, flags, "1.2.3")
    plugin = {k.removeprefix("plugins/skillopt-sleep/"): v for k, v in files.items()}
    mcp = json.loads(plugin[".mcp.json"])["mcpServers"]["skillopt-sleep"]
    assert mcp == {"command": program[0], "args": ["mcp", *flags]}
    hook = json.loads(plugin["hooks/hooks.json"])["hooks"]["SessionEnd"][0]["hooks"][0]
    assert hook["command"] == "'/opt/my venv/bin/skillopt-sleep' session-end --agent claude " \
        "--state-dir /s"  # fmt: skip
    commands = {k: v for k, v in plugin.items() if k.startswith("commands/")}
    assert sorted(commands) == [
        f"commands/{n}.md" for n in ("adopt", "handoff", "report", "status")
    ]
    for text in commands.values():
        assert text.startswith("---\ndescription: ") and "Request: $ARGUMENTS" in text
    for text in files.values():
        assert "skillopt-sleep once" not in text and "skillopt-sleep session-end" not in text
    version = json.loads(plugin[".claude-plugin/plugin.json"])["version"]
    other = ap.claude_marketplace([*program, "mcp"], program, [], "1.2.3")
    assert version.startswith("1.2.3-")
    assert (
        json.loads(other["plugins/skillopt-sleep/.claude-plugin/plugin.json"])["version"] != version
    )
    catalog = json.loads(files[".claude-plugin/marketplace.json"])
    assert catalog["plugins"][0]["version"] == version


@pytest.mark.parametrize(
    "existing", ["", "one line\n", "no final newline", "a\n\nb\n", f"x\n{ap.BLOCK_BEGIN}\nold\n"
                 f"{ap.BLOCK_END}\ny\n"],
)  # fmt: skip
def test_the_block_is_put_in_once_and_taken_out_cleanly(existing: str) -> None:
    block = ap.instructions_block("copilot")
    once = ap.with_block(existing, block)
    assert ap.with_block(once, block) == once and once.count(ap.BLOCK_BEGIN) == 1
    back = ap.without_block(once)
    if ap.BLOCK_BEGIN in existing:
        assert back == "x\ny\n"
    else:
        assert back == (existing if existing.endswith("\n") or not existing else existing + "\n")


def test_only_our_folder_under_the_data_home_is_used(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    assert main(["integrate", "claude", "--plugin", "--json"]) == 0
    paths = json.loads(capsys.readouterr().out)["files"]
    assert all(p.startswith(str(home / "data" / "skillopt-sleep") + os.sep) for p in paths)


def test_the_commands_name_only_tools_and_flags_that_exist(tmp_path: Path) -> None:
    """The commands drive the MCP server's tools and `once --handoff`: every tool a command
    names is one the server lists, and the invocation it runs parses."""
    args = build_parser(["mcp"]).parse_args(["mcp", "--state-dir", str(tmp_path)])
    tools = {t.name for t in anyio.run(build_server(args).list_tools)}
    named: set[str] = set()
    for path, text in ap.shipped("claude").items():
        if path.startswith("commands/"):
            named |= set(re.findall(r"`([a-z_]+)` tool", text))
    assert named == {"status", "latest_report", "proposal_diff", "adopt", "handoff_next",
                     "handoff_answer"} and named <= tools  # fmt: skip
    rendered = ap.render_invocations("skillopt-sleep once --handoff", ["skillopt-sleep"], [])
    parsed = build_parser(rendered.split()[1:]).parse_args(rendered.split()[1:])
    assert parsed.handoff is True
    handoff = ap.shipped("claude")["commands/handoff.md"]
    assert "`skillopt-sleep once --handoff --wait`" in handoff  # one sitting, in the background
    waits = ap.render_invocations("skillopt-sleep once --handoff --wait", ["skillopt-sleep"], [])
    parsed = build_parser(waits.split()[1:]).parse_args(waits.split()[1:])
    assert parsed.handoff is True and parsed.wait > 0


def test_the_help_names_what_codex_gets(capsys: pytest.CaptureFixture[str]) -> None:
    """Codex reads skills, not custom prompts (issue 32, item 19)."""
    assert main(["integrate", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "Codex's skills" in help_text and "custom prompt" not in help_text
