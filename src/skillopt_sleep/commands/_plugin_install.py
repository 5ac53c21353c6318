"""`skillopt-sleep integrate AGENT --plugin [--remove]`: the plugin's files, in or out.

1. **Plan** (:func:`plan`): the files to write or delete and the agent commands to run, for
   Claude Code (a local marketplace directory of ours, then ``claude plugin marketplace
   add`` and ``claude plugin install``), Codex (skills and a marked block in ``AGENTS.md``)
   or Copilot (a marked block in ``copilot-instructions.md``).
2. **Refuse** before changing anything when a file we would write or delete is not ours (no
   marker), or a managed block is broken: a user's file is never replaced.
3. **Apply**: atomic writes; removal deletes only our files and takes only our block out.
   Installing twice changes nothing; removing after installing leaves the user's files as
   they were (a file we created is deleted again).
"""

from __future__ import annotations

import argparse
import difflib
import os
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from skillopt.atomicio import atomic_write_text
from skillopt_sleep import agent_plugin as ap
from skillopt_sleep.commands._common import EXIT_FAILED, EXIT_OK, emit_json, refuse, say

__all__ = ["OWNED", "Plan", "apply", "claude_dir", "codex_home", "copilot_home", "plan", "run"]

OWNED = ".written-by-skillopt-sleep"  # in the marketplace directory: it is ours to replace


@dataclass(slots=True)
class Plan:
    """What installing or removing changes: ``files`` (path -> new text, ``None`` to delete)
    and the agent commands to run after writing (install) or before deleting (remove)."""

    agent: str
    remove: bool
    files: dict[Path, str | None] = field(default_factory=dict)
    commands: list[list[str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    before: dict[Path, str] = field(default_factory=dict)
    keep: Path | None = None  # removing: folders left empty are deleted up to this one

    def changed(self) -> dict[Path, str | None]:
        return {p: t for p, t in self.files.items() if t != self.before.get(p)}


def claude_dir() -> Path:
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data).expanduser() / "skillopt-sleep" / "claude-marketplace"


def codex_home() -> Path:
    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex").expanduser()


def copilot_home() -> Path:
    return Path(os.environ.get("COPILOT_HOME") or Path.home() / ".copilot").expanduser()


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _claude(out: Plan, server: list[str], program: list[str], flags: list[str],
            version: str) -> None:  # fmt: skip
    root = claude_dir()
    ours = (root / OWNED).exists()
    if root.exists() and any(root.iterdir()) and not ours:
        out.problems.append(f"{root} exists and was not written by skillopt-sleep")
        return
    plugin_id = f"{ap.PLUGIN}@{ap.MARKETPLACE}"
    if out.remove:
        out.commands = [["claude", "plugin", "uninstall", plugin_id],
                        ["claude", "plugin", "marketplace", "remove", ap.MARKETPLACE]]  # fmt: skip
        if ours:
            for path in sorted(p for p in root.rglob("*") if p.is_file()):
                out.files[path] = None
        return
    files = ap.claude_marketplace(server, program, flags, version)
    for rel, text in files.items():
        out.files[root / rel] = text
    out.files[root / OWNED] = "This directory is managed by `skillopt-sleep integrate`.\n"
    if ours:  # files of an older install that this one no longer has
        for path in root.rglob("*"):
            if path.is_file() and path not in out.files:
                out.files[path] = None
    out.commands = [["claude", "plugin", "marketplace", "add", str(root)],
                    ["claude", "plugin", "install", plugin_id]]  # fmt: skip


def _skills(out: Plan, program: list[str], flags: list[str]) -> None:
    for rel, text in ap.codex_skills(program, flags).items():
        path = codex_home() / rel
        existing = _read(path)
        if existing is not None and ap.MARKER not in existing:
            out.problems.append(f"{path} exists and was not written by skillopt-sleep")
        elif not out.remove:
            out.files[path] = text
        elif existing is not None:
            out.files[path] = None


def _block(out: Plan, path: Path, agent: str) -> None:
    existing = _read(path)
    try:
        if out.remove:
            if existing is not None:
                after = ap.without_block(existing)
                out.files[path] = after if after.strip() else None
        else:
            out.files[path] = ap.with_block(existing or "", ap.instructions_block(agent))
    except ValueError as exc:
        out.problems.append(f"{path}: {exc}")


def plan(agent: str, *, remove: bool, server: list[str], program: list[str], flags: list[str],
         version: str) -> Plan:  # fmt: skip
    """What ``integrate AGENT --plugin`` (``remove``: ``--remove``) would change."""
    out = Plan(agent=agent, remove=remove)
    if agent == "claude":
        _claude(out, server, program, flags, version)
        out.keep = claude_dir().parent.parent if remove else None
    elif agent == "codex":
        out.keep = codex_home() / "skills" if remove else None
        _skills(out, program, flags)
        _block(out, codex_home() / "AGENTS.md", agent)
    elif agent == "copilot":
        _block(out, copilot_home() / "copilot-instructions.md", agent)
    else:
        out.problems.append(f"{agent} has no plugin; `integrate {agent} --write` registers MCP")
    for path in out.files:
        existing = _read(path) if path.is_file() else None
        if existing is not None:
            out.before[path] = existing
    return out


def apply(changes: Plan) -> list[Path]:
    """Write and delete ``changes.files`` (only what differs); returns the paths changed."""
    done: list[Path] = []
    for path, text in sorted(changes.changed().items()):
        if text is None:
            path.unlink(missing_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text)
        done.append(path)
    if changes.keep is not None:
        for path in done:
            folder = path.parent
            while folder != changes.keep and changes.keep in folder.parents:
                if not folder.is_dir() or any(folder.iterdir()):
                    break
                folder.rmdir()
                folder = folder.parent
    return done


def _show(changes: Plan, write: bool) -> None:
    verb = "removing" if changes.remove else "installing"
    say(f"# {verb} the {changes.agent} plugin" + ("" if write else
        " (run again with --write to make these changes)"))  # fmt: skip
    changed = changes.changed()
    for path, text in sorted(changed.items()):
        if text is None:
            say(f"delete {path}")
            continue
        before = changes.before.get(path, "")
        if before:
            diff = difflib.unified_diff(before.splitlines(), text.splitlines(), str(path),
                                        str(path), lineterm="")  # fmt: skip
            say("\n".join(diff))
        else:
            say(f"write {path}")
    if not changed:
        say("(files already as they should be)")
    for command in changes.commands:
        say(f"run: {shlex.join(command)}")


async def _run_cli(command: list[str], limit: float) -> tuple[int, str]:
    with anyio.fail_after(limit):
        done = await anyio.run_process(command, check=False, stdin=None)
    return done.returncode, (done.stdout + done.stderr).decode("utf-8", "replace")


def run(args: argparse.Namespace, changes: Plan, timeout: float) -> int:
    if changes.problems:
        return refuse(args, "not_ours", "; ".join(changes.problems) + " (nothing was changed)")
    if not args.json:
        _show(changes, args.write)
    if not args.write:
        if args.json:
            emit_json({"ok": True, "agent": changes.agent, "remove": changes.remove,
                       "files": {str(p): t is not None for p, t in changes.changed().items()},
                       "commands": changes.commands, "written": False})  # fmt: skip
        return EXIT_OK
    if changes.commands and shutil.which(changes.commands[0][0]) is None:
        shown = "\n".join(shlex.join(c) for c in changes.commands)
        return refuse(args, "agent_not_found",
                      f"`{changes.commands[0][0]}` is not on PATH; nothing was changed. "
                      f"Run --write where it is, or by hand:\n{shown}")  # fmt: skip
    outputs: list[str] = []
    if not changes.remove:
        done = apply(changes)
    for command in changes.commands:
        try:
            code, output = anyio.run(_run_cli, command, timeout)
        except (OSError, TimeoutError) as exc:
            code, output = -1, str(exc)
        outputs.append(output.strip())
        if code != 0 and not changes.remove:  # removing what is already gone is fine
            return refuse(args, "agent_cli_failed",
                          f"{shlex.join(command)} exited {code}: {output.strip()}",
                          EXIT_FAILED)  # fmt: skip
    if changes.remove:
        done = apply(changes)
    if args.json:
        emit_json({"ok": True, "agent": changes.agent, "remove": changes.remove,
                   "changed": [str(p) for p in done], "commands": changes.commands,
                   "written": True})  # fmt: skip
    else:
        for output in outputs:
            if output:
                say(output)
        say(f"{len(done)} file(s) changed")
    return EXIT_OK
