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
``pi``           ``~/.pi`` (``agent/sessions/``)
``opencode``     ``$XDG_DATA_HOME/opencode/opencode.db`` (``~/.local/share/...``)
==============  =====================================================================

``auto`` stands for every source whose location exists.
"""

from __future__ import annotations

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
    "default_opencode_db",
    "default_vscode_user_dirs",
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
    pi_home: Path = Path("~/.pi")
    vscode_user_dirs: Sequence[Path] = field(default_factory=tuple)
    opencode_db: Path | None = None
    environ: Mapping[str, str] | None = None  # for tests; default os.environ


def _env(homes: Homes) -> Mapping[str, str]:
    return os.environ if homes.environ is None else homes.environ


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or Path.home())


def _expand(path: Path, env: Mapping[str, str]) -> Path:
    text = str(path)
    if text == "~" or text.startswith("~/"):
        return _home(env) / text[2:]
    return path


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


def default_opencode_db(env: Mapping[str, str], platform: str = sys.platform) -> Path:
    if platform.startswith("win") and not env.get("XDG_DATA_HOME"):
        base = Path(env.get("LOCALAPPDATA") or _home(env) / "AppData" / "Local")
    else:
        base = Path(env.get("XDG_DATA_HOME") or _home(env) / ".local" / "share")
    return base / "opencode" / "opencode.db"


def specs_for(kind: SourceKind, homes: Homes) -> list[SourceSpec]:
    """Where ``kind`` is read from (several folders for VS Code)."""
    env = _env(homes)
    if kind is SourceKind.COPILOT:
        dirs = list(homes.vscode_user_dirs) or default_vscode_user_dirs(env)
        return [SourceSpec(kind=kind, home=_expand(d, env)) for d in dirs]
    if kind is SourceKind.OPENCODE:
        db = homes.opencode_db or default_opencode_db(env)
        return [SourceSpec(kind=kind, home=_expand(db, env))]
    single = {
        SourceKind.CLAUDE_CODE: homes.claude_home,
        SourceKind.CODEX: homes.codex_home,
        SourceKind.COPILOT_CLI: homes.copilot_cli_home,
        SourceKind.CURSOR: homes.cursor_home,
        SourceKind.PI: homes.pi_home,
    }
    return [SourceSpec(kind=kind, home=_expand(single[kind], env))]


_MARKS = {  # what shows a source is really there, below its home
    SourceKind.CLAUDE_CODE: ("projects",),
    SourceKind.CODEX: ("sessions", "archived_sessions"),
    SourceKind.COPILOT: ("workspaceStorage",),
    SourceKind.COPILOT_CLI: ("session-state", "session-store.db"),
    SourceKind.CURSOR: ("projects",),
    SourceKind.PI: ("agent/sessions",),
}


def present(spec: SourceSpec) -> bool:
    """Whether the source's sessions exist there."""
    if spec.kind is SourceKind.OPENCODE:
        return spec.home.is_file()
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
