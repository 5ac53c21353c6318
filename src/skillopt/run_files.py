"""A run directory's file I/O, shared by the night's and the trainer's run directories.

Every write is atomic (a killed process leaves the old file or the new one, never half of
one) and passes the redactor first, so no secret shape reaches the disk; a JSON file that
does not parse is a :class:`~skillopt.errors.CorruptStateError` naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from skillopt.atomicio import atomic_write_text, dumps_json
from skillopt.errors import CorruptStateError
from skillopt.redact import redact_obj, sanitize

__all__ = ["RunFiles"]


class RunFiles:
    """Atomic, redacted writes and strict JSON reads under ``root``; a relative path is
    taken from ``root``, an absolute one as it is."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write_json(self, path: str | Path, data: Any) -> None:
        self.put_text(self.root / path, dumps_json(redact_obj(data)))

    def write_text(self, path: str | Path, text: str) -> None:
        self.put_text(self.root / path, sanitize(text))

    def put_text(self, target: Path, text: str) -> None:
        """Write ``text``, already redacted, to ``target`` atomically (every write ends here)."""
        atomic_write_text(target, text)

    def read_json(self, path: str | Path) -> Any:
        """Parse ``path``; raises CorruptStateError (naming it) when it is not valid JSON."""
        target = self.root / path
        try:
            return json.loads(target.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptStateError(str(target), f"unreadable JSON ({exc})") from exc
