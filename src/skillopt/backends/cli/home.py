"""A fresh CLI home for every call, so nothing a call sends persists after it.

The agent CLIs keep per-call state in their home directory: copilot a session folder
(``session-state/<id>/events.jsonl``, the prompt included) and a session database, codex
its sqlite files (even with ``--disable sqlite``), claude its session files. Each call
therefore runs with the CLI's home variable (``CODEX_HOME``, ``CLAUDE_CONFIG_DIR``,
``COPILOT_HOME``) pointing at a new directory that holds only symlinks to the member's
login and settings (the flavor's :meth:`keep` list, from the member's isolated home or the
user's own), and is deleted when the call ends, however it ends (answer, error, timeout,
cancellation: the process group is dead by then).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

__all__ = ["call_home", "default_home", "user_home"]


def user_home(environ: Mapping[str, str]) -> Path:
    """The user's home as the CLI would see it (``HOME`` of the environment it gets)."""
    return Path(environ.get("HOME") or Path.home())


def default_home(environ: Mapping[str, str], env_name: str, dirname: str) -> Path:
    """Where a CLI keeps its home when not isolated: its variable, else ``~/<dirname>``."""
    configured = environ.get(env_name)
    return Path(configured) if configured else user_home(environ) / dirname


@contextmanager
def call_home(keep: Mapping[str, Path], *, root: Path | None = None) -> Iterator[Path]:
    """A new home linking ``keep`` (name in the home -> the file or directory it stands
    for; missing ones are skipped); removed on exit."""
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="skillopt-cli-home-", dir=root))
    try:
        for name, target in keep.items():
            if target.exists():
                (home / name).symlink_to(target)
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)
