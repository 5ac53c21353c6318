"""Where the genuine agent CLIs are (``make tools`` installs them into ``.tools/bin``)."""

from __future__ import annotations

import shutil
from pathlib import Path

TOOLS_BIN = Path(__file__).resolve().parents[2] / ".tools" / "bin"


def find_cli(name: str) -> str | None:
    """The CLI's executable: ``.tools/bin`` first, then ``PATH``; ``None`` when absent."""
    local = TOOLS_BIN / name
    if local.exists():
        return str(local)
    return shutil.which(name)
