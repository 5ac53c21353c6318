"""The agent plugin's files, rendered for this install (pure: no writes, no agent CLI).

The shipped files (``plugin/`` in this package) name the program as ``skillopt-sleep``;
rendering puts this install's own invocation there (with ``--config``/``--state-dir``
when given), so the agent runs the same skillopt-sleep the user installed with, wherever
its ``PATH`` points.

1. **Claude Code** (:func:`claude_marketplace`): a local marketplace directory holding
   ``.claude-plugin/marketplace.json`` and the plugin under ``plugins/skillopt-sleep/``
   (manifest, ``commands/*.md``, ``.mcp.json``, ``hooks/hooks.json``). ``claude plugin
   marketplace add DIR`` then ``claude plugin install`` loads it in place.
2. **Codex** (:func:`codex_skills`): the same commands as skills
   (``$CODEX_HOME/skills/skillopt-<name>/SKILL.md``): Codex 0.169 reads skills there and no
   longer has the ``~/.codex/prompts`` custom prompts.
3. **Codex and Copilot** (:func:`with_block` / :func:`without_block`): a marked block of
   instructions in ``AGENTS.md`` / ``copilot-instructions.md``, added or taken out without
   touching the rest of the user's file.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Sequence
from importlib import resources
from pathlib import PurePosixPath
from typing import Any

__all__ = [
    "BLOCK_BEGIN",
    "BLOCK_END",
    "MARKER",
    "MARKETPLACE",
    "PLUGIN",
    "SKILL_PREFIX",
    "claude_marketplace",
    "codex_skills",
    "instructions_block",
    "package_version",
    "render_invocations",
    "shipped",
    "with_block",
    "without_block",
]

PLUGIN = "skillopt-sleep"
MARKETPLACE = "skillopt-sleep-local"
SKILL_PREFIX = "skillopt-"
MARKER = "<!-- written by `skillopt-sleep integrate --plugin`; `--remove` takes it out -->"
BLOCK_BEGIN = "<!-- skillopt-sleep:begin (managed by `skillopt-sleep integrate`) -->"
BLOCK_END = "<!-- skillopt-sleep:end -->"

#: The invocations the shipped files spell with the bare program name, and their arguments.
_INVOCATIONS = {
    "skillopt-sleep once --handoff": ("once", "--handoff"),
    "skillopt-sleep session-end --agent claude": ("session-end", "--agent", "claude"),
}
_PLUGIN_REF = re.compile(r"/skillopt-sleep:([a-z-]+)")


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # slow: not for `--help`

    try:
        return version("skillopt")
    except PackageNotFoundError:
        return "0"


def shipped(kind: str) -> dict[str, str]:
    """Every shipped file of ``plugin/<kind>`` by its path inside it (POSIX separators)."""
    root = resources.files("skillopt_sleep").joinpath("plugin", kind)
    found: dict[str, str] = {}

    def walk(node: Any, prefix: PurePosixPath) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.name == "__pycache__":
                continue
            if child.is_dir():
                walk(child, prefix / child.name)
            else:
                found[str(prefix / child.name)] = child.read_text(encoding="utf-8")

    walk(root, PurePosixPath())
    return found


def render_invocations(text: str, program: Sequence[str], flags: Sequence[str]) -> str:
    """``text`` with each shipped invocation spelled as this install runs it."""
    for bare, arguments in _INVOCATIONS.items():
        text = text.replace(bare, shlex.join([*program, *arguments, *flags]))
    return text


def _claude_plugin(server: Sequence[str], program: Sequence[str], flags: Sequence[str],
                   release: str) -> dict[str, str]:  # fmt: skip
    files = {
        path: render_invocations(text, program, flags) for path, text in shipped("claude").items()
    }
    mcp = json.loads(files[".mcp.json"])
    mcp["mcpServers"][PLUGIN] = {"command": server[0], "args": list(server[1:])}
    files[".mcp.json"] = json.dumps(mcp, indent=2) + "\n"
    # Claude Code caches a plugin by its version: a version per content makes a changed
    # install (another program path, other flags) load, and an unchanged one stay put.
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:8]
    manifest = json.loads(files[".claude-plugin/plugin.json"])
    manifest["version"] = f"{release}-{digest}"
    files[".claude-plugin/plugin.json"] = json.dumps(manifest, indent=2) + "\n"
    return files


def claude_marketplace(
    server: Sequence[str], program: Sequence[str], flags: Sequence[str], release: str
) -> dict[str, str]:
    """The local marketplace directory's files: its catalog and the rendered plugin."""
    plugin = _claude_plugin(server, program, flags, release)
    manifest = json.loads(plugin[".claude-plugin/plugin.json"])
    catalog = {
        "name": MARKETPLACE,
        "description": "skillopt-sleep's plugin, installed from this machine by "
        "`skillopt-sleep integrate claude --plugin`",
        "owner": {"name": "skillopt"},
        "plugins": [{
            "name": PLUGIN,
            "source": f"./plugins/{PLUGIN}",
            "description": manifest["description"],
            "version": manifest["version"],
        }],
    }  # fmt: skip
    files = {f"plugins/{PLUGIN}/{path}": text for path, text in plugin.items()}
    files[".claude-plugin/marketplace.json"] = json.dumps(catalog, indent=2) + "\n"
    return files


def _codex_skill(name: str, text: str) -> str:
    """A Claude Code command as a Codex skill: front matter ``name`` and ``description``
    (the command's), the same steps, and the user's request taken from the conversation
    rather than from ``$ARGUMENTS``."""
    head, _, body = text.partition("\n---\n")
    description = next(
        line.partition(":")[2].strip() for line in head.splitlines()
        if line.startswith("description:")
    )  # fmt: skip
    body = body.replace("Request: $ARGUMENTS", "The request is the user's message.")
    body = _PLUGIN_REF.sub(lambda m: f"the `{SKILL_PREFIX}{m.group(1)}` skill", body)
    front = f"---\nname: {name}\ndescription: {json.dumps(description)}\n---\n"
    return front + body.rstrip("\n") + "\n\n" + MARKER + "\n"


def codex_skills(program: Sequence[str], flags: Sequence[str]) -> dict[str, str]:
    """``skills/skillopt-<name>/SKILL.md`` (under ``$CODEX_HOME``) for each command."""
    out: dict[str, str] = {}
    for path, text in shipped("claude").items():
        if path.startswith("commands/"):
            name = SKILL_PREFIX + PurePosixPath(path).stem
            out[f"skills/{name}/SKILL.md"] = _codex_skill(
                name, render_invocations(text, program, flags)
            )
    return out


def instructions_block(agent: str) -> str:
    """The marked instructions for ``agent`` (``codex`` names its prompts)."""
    text = shipped("instructions")["instructions.md"].rstrip("\n")
    if agent == "codex":
        text += (
            "\n- The skills `skillopt-status`, `skillopt-report`, `skillopt-adopt` and "
            "`skillopt-handoff` walk through each step by step."
        )
    return f"{BLOCK_BEGIN}\n{text}\n{BLOCK_END}\n"


def _span(text: str) -> tuple[int, int] | None:
    start = text.find(BLOCK_BEGIN)
    if start < 0:
        return None
    end = text.find(BLOCK_END, start)
    if end < 0:
        raise ValueError(f"{BLOCK_BEGIN!r} without {BLOCK_END!r}: fix the file by hand")
    end += len(BLOCK_END)
    return start, end + (1 if text[end : end + 1] == "\n" else 0)


def with_block(existing: str, block: str) -> str:
    """``existing`` with the managed block put in place (replaced, or appended after a
    blank line); everything else is kept byte for byte."""
    span = _span(existing)
    if span is not None:
        return existing[: span[0]] + block + existing[span[1] :]
    if not existing:
        return block
    return existing + ("\n" if existing.endswith("\n") else "\n\n") + block


def without_block(existing: str) -> str:
    """``existing`` without the managed block (and the blank line :func:`with_block` put
    before it); the same text when it has none."""
    span = _span(existing)
    if span is None:
        return existing
    before, after = existing[: span[0]], existing[span[1] :]
    if before.endswith("\n\n") and not after:
        before = before[:-1]
    return before + after
