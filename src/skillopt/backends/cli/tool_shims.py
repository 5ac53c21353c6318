"""Real executable tool shims that record every call.

A tool-aware attempt puts small ``/bin/sh`` scripts (``search``, ...) into ``<workspace>/tools``
(also on the agent's PATH). Each appends one line to a log outside the workspace and prints a
fixed, synthetic result. ``tools_called`` is read back from that log, so tool use is verified
from what actually ran, never taken from the model's own claim.
"""

from __future__ import annotations

import re
import shlex
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from skillopt.errors import ConfigError

__all__ = ["DEFAULT_OUTPUT", "LOG_NAME", "ToolShims", "install_shims", "read_calls"]

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
DEFAULT_OUTPUT = "No results found for this synthetic query."
LOG_NAME = "tool_calls.log"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolShims:
    """Where the shims live and where their calls are logged."""

    bin_dir: Path
    log_path: Path
    names: tuple[str, ...]

    def path_env(self, current_path: str) -> str:
        return f"{self.bin_dir}:{current_path}" if current_path else str(self.bin_dir)

    def hint(self) -> str:
        """A prompt line telling the agent the tools exist and how to run them."""
        listed = ", ".join(f"`{self.bin_dir.name}/{n} <args>`" for n in self.names)
        return (
            f"Shell tools available in the working directory: {listed} "
            "(run them with your shell tool when they help)."
        )

    def calls(self) -> tuple[str, ...]:
        """Tool names in call order, as recorded by the shims themselves."""
        return tuple(name for name, _ in read_calls(self.log_path))


def install_shims(
    workspace: Path,
    log_dir: Path,
    names: Sequence[str],
    outputs: Mapping[str, str] | None = None,
) -> ToolShims:
    """Write one executable shim per tool name into ``workspace/tools``."""
    bin_dir = workspace / "tools"
    bin_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / LOG_NAME
    log_path.touch()
    for name in names:
        if not _NAME.match(name):
            raise ConfigError(f"invalid tool name {name!r}", key="tools")
        output = (outputs or {}).get(name, DEFAULT_OUTPUT)
        script = (
            "#!/bin/sh\n"
            f"# skillopt tool shim: logs the call, prints a fixed result\n"
            f"printf '%s\\t%s\\n' {shlex.quote(name)} \"$*\" | tr -d '\\r' "
            f">> {shlex.quote(str(log_path))}\n"
            f"printf '%s\\n' {shlex.quote(output)}\n"
        )
        shim = bin_dir / name
        shim.write_text(script, encoding="utf-8")
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return ToolShims(bin_dir=bin_dir, log_path=log_path, names=tuple(names))


def read_calls(log_path: Path) -> list[tuple[str, str]]:
    """(tool, arguments) pairs from a shim log; unknown lines are ignored."""
    if not log_path.is_file():
        return []
    calls: list[tuple[str, str]] = []
    for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines():
        name, _, args = line.partition("\t")
        if _NAME.match(name):
            calls.append((name, args))
    return calls
