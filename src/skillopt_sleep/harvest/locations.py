"""Where each agent keeps its sessions by default, and which of them exist on this machine.

The defaults (each overridable in ``[sources]``, see docs/harvest-mine-adopt.md):

==============  =====================================================================
``claude_code``  ``~/.claude`` (``projects/**/*.jsonl``)
``codex``        ``~/.codex`` (``sessions/`` and ``archived_sessions/``)
``copilot``      every VS Code flavour's user folder: ``Code``, ``Code - Insiders``,
                 ``VSCodium``, ``Cursor`` and ``Code - OSS`` under ``$XDG_CONFIG_HOME``
                 (``~/.config``) on Linux, ``~/Library/Application Support`` on macOS,
                 ``%APPDATA%`` on Windows; ``$VSCODE_PORTABLE/user-data/User``; the
                 remote servers' ``~/.vscode-server*/data/User``
``copilot_cli``  ``~/.copilot`` (``session-state/``, ``session-store.db``)
``cursor``       ``~/.cursor`` (``projects/<slug>/agent-transcripts/``)
``pi``           every folder Pi may have written sessions to (:func:`pi_session_dirs`)
``opencode``     every database OpenCode may have written (:func:`default_opencode_dbs`)
==============  =====================================================================

Pi (pi-coding-agent) keeps its settings in its agent folder, ``$PI_CODING_AGENT_DIR`` or
``~/.pi/agent``, and writes a session to the first of: ``--session-dir``,
``$PI_CODING_AGENT_SESSION_DIR``, the ``sessionDir`` setting (the project's
``.pi/settings.json`` over the agent folder's ``settings.json``; ``~`` expanded, a
relative path taken from the folder Pi was started in) and ``<agent folder>/sessions``.
A user who moved them once still has the old ones, so every one of those folders is read
(``--session-dir`` lives only on a command line: name it in ``pi_session_dirs``).

OpenCode keeps its database in ``$XDG_DATA_HOME/opencode`` (``~/.local/share/opencode``
on every OS, Windows included; ``%LOCALAPPDATA%\\opencode`` is read there too). Its name is
``$OPENCODE_DB`` when set (absolute, or relative to that folder; ``:memory:`` keeps none),
else ``opencode.db`` for the release channels and ``opencode-<channel>.db`` for the others
(``OPENCODE_DISABLE_CHANNEL_DB`` turns the channel names off). The channel is built into
the binary, so every ``opencode*.db`` there is read.

``auto`` stands for every source whose location exists.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from skillopt_sleep.harvest.digest import SourceKind

__all__ = [
    "AUTO",
    "VSCODE_FLAVOURS",
    "Homes",
    "SourceSpec",
    "default_opencode_dbs",
    "default_vscode_user_dirs",
    "pi_session_dirs",
    "present",
    "resolve",
    "specs_for",
]

AUTO = "auto"
VSCODE_FLAVOURS = ("Code", "Code - Insiders", "VSCodium", "Cursor", "Code - OSS")
_REMOTE_SERVERS = (".vscode-server", ".vscode-server-insiders", ".vscodium-server")


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceSpec:
    """One transcript source: ``home`` is where it keeps its sessions (``~/.claude``, a
    VS Code user folder, OpenCode's database file)."""

    kind: SourceKind
    home: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class Homes:
    """Where to look, as configured (``None`` / empty = the defaults above)."""

    claude_home: Path = Path("~/.claude")
    codex_home: Path = Path("~/.codex")
    copilot_cli_home: Path = Path("~/.copilot")
    cursor_home: Path = Path("~/.cursor")
    pi_home: Path | None = None  # None: $PI_CODING_AGENT_DIR/.. or ~/.pi
    pi_session_dirs: Sequence[Path] = field(default_factory=tuple)  # --session-dir ones
    vscode_user_dirs: Sequence[Path] = field(default_factory=tuple)
    opencode_db: Path | None = None
    project: Path | None = None  # whose .pi/settings.json may move Pi's sessions
    environ: Mapping[str, str] | None = None  # for tests; default os.environ


def _env(homes: Homes) -> Mapping[str, str]:
    return os.environ if homes.environ is None else homes.environ


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or Path.home())


def _expand(path: Path | str, env: Mapping[str, str]) -> Path:
    text = str(path)
    if text == "~" or text.startswith(("~/", "~\\")):
        return _home(env) / text[2:]
    return Path(path)


def default_vscode_user_dirs(env: Mapping[str, str], platform: str = sys.platform) -> list[Path]:
    """Every VS Code flavour's ``User`` folder this OS would use (existing or not)."""
    home = _home(env)
    if platform == "darwin":
        base = home / "Library" / "Application Support"
    elif platform.startswith("win"):
        base = Path(env.get("APPDATA") or home / "AppData" / "Roaming")
    else:
        base = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    dirs = [base / flavour / "User" for flavour in VSCODE_FLAVOURS]
    if env.get("VSCODE_PORTABLE"):
        dirs.append(Path(env["VSCODE_PORTABLE"]) / "user-data" / "User")
    dirs.extend(home / server / "data" / "User" for server in _REMOTE_SERVERS)
    return dirs


_TRUE = ("1", "true")


def _opencode_data_dirs(env: Mapping[str, str], platform: str) -> list[Path]:
    dirs = [Path(env.get("XDG_DATA_HOME") or _home(env) / ".local" / "share") / "opencode"]
    if platform.startswith("win") and env.get("LOCALAPPDATA"):
        dirs.append(Path(env["LOCALAPPDATA"]) / "opencode")
    return dirs


def default_opencode_dbs(env: Mapping[str, str], platform: str = sys.platform) -> list[Path]:
    """Every database OpenCode may have written on this machine: ``$OPENCODE_DB`` alone
    when set, else each data folder's ``opencode.db`` and its channel databases."""
    data = _opencode_data_dirs(env, platform)
    chosen = env.get("OPENCODE_DB", "")
    if chosen == ":memory:":
        return []
    if chosen:
        named = _expand(chosen, env)
        return [named] if named.is_absolute() else [d / named for d in data]
    found: list[Path] = []
    for folder in data:
        found.append(folder / "opencode.db")
        if env.get("OPENCODE_DISABLE_CHANNEL_DB", "").lower() not in _TRUE:
            found.extend(sorted(folder.glob("opencode-*.db")))
    return found


def _pi_agent_dir(homes: Homes, env: Mapping[str, str]) -> Path:
    if homes.pi_home is not None:
        return _expand(homes.pi_home, env) / "agent"
    chosen = env.get("PI_CODING_AGENT_DIR")
    return _expand(chosen, env) if chosen else _home(env) / ".pi" / "agent"


def _setting(settings: Path, key: str) -> str:
    """A string setting of a JSON settings file ("" when absent or unreadable)."""
    try:
        value = json.loads(settings.read_text(encoding="utf-8")).get(key)
    except (OSError, ValueError, AttributeError):
        return ""
    return value if isinstance(value, str) else ""


def pi_session_dirs(homes: Homes) -> list[Path]:
    """Every folder Pi may have written sessions to, the default one last."""
    env = _env(homes)
    agent = _pi_agent_dir(homes, env)
    chosen = [str(d) for d in homes.pi_session_dirs]
    chosen.append(env.get("PI_CODING_AGENT_SESSION_DIR", ""))
    if homes.project is not None:
        chosen.append(_setting(homes.project / ".pi" / "settings.json", "sessionDir"))
    chosen.append(_setting(agent / "settings.json", "sessionDir"))
    dirs: list[Path] = []
    for text in filter(None, (c.strip() for c in chosen)):
        folder = _expand(text, env)
        if not folder.is_absolute():  # relative to where Pi started: the project
            if homes.project is None:
                continue
            folder = homes.project / folder
        dirs.append(folder)
    dirs.append(agent / "sessions")
    return list(dict.fromkeys(dirs))


def specs_for(kind: SourceKind, homes: Homes) -> list[SourceSpec]:
    """Where ``kind`` is read from (several folders for VS Code, Pi and OpenCode)."""
    env = _env(homes)
    if kind is SourceKind.COPILOT:
        dirs = list(homes.vscode_user_dirs) or default_vscode_user_dirs(env)
        return [SourceSpec(kind=kind, home=_expand(d, env)) for d in dirs]
    if kind is SourceKind.OPENCODE:
        dbs = [homes.opencode_db] if homes.opencode_db else default_opencode_dbs(env)
        return [SourceSpec(kind=kind, home=_expand(db, env)) for db in dbs]
    if kind is SourceKind.PI:
        return [SourceSpec(kind=kind, home=folder) for folder in pi_session_dirs(homes)]
    single = {
        SourceKind.CLAUDE_CODE: homes.claude_home,
        SourceKind.CODEX: homes.codex_home,
        SourceKind.COPILOT_CLI: homes.copilot_cli_home,
        SourceKind.CURSOR: homes.cursor_home,
    }
    return [SourceSpec(kind=kind, home=_expand(single[kind], env))]


_MARKS = {  # what shows a source is really there, below its home
    SourceKind.CLAUDE_CODE: ("projects",),
    SourceKind.CODEX: ("sessions", "archived_sessions"),
    SourceKind.COPILOT: ("workspaceStorage",),
    SourceKind.COPILOT_CLI: ("session-state", "session-store.db"),
    SourceKind.CURSOR: ("projects",),
}


def present(spec: SourceSpec) -> bool:
    """Whether the source's sessions exist there."""
    if spec.kind is SourceKind.OPENCODE:
        return spec.home.is_file()
    if spec.kind is SourceKind.PI:
        return spec.home.is_dir()
    return any((spec.home / mark).exists() for mark in _MARKS[spec.kind])


def resolve(kinds: Sequence[str], homes: Homes) -> list[SourceSpec]:
    """The sources to read for the configured ``kinds``; ``auto`` adds every source that
    exists on this machine. Each location is listed once."""
    chosen: dict[tuple[SourceKind, Path], SourceSpec] = {}
    for name in kinds:
        if name == AUTO:
            for kind in SourceKind:
                for spec in specs_for(kind, homes):
                    if present(spec):
                        chosen.setdefault((spec.kind, spec.home), spec)
        else:
            for spec in specs_for(SourceKind(name), homes):
                chosen.setdefault((spec.kind, spec.home), spec)
    return list(chosen.values())
