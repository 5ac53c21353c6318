"""Read a JSONL transcript line by line in bounded memory.

A line longer than ``max_line_bytes`` is skipped (read through in chunks, never held
whole) and counted; a line that is not a JSON object is skipped and counted. Nothing
here raises for bad content: only an unreadable file raises ``OSError``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024
_CHUNK = 64 * 1024


@dataclass(slots=True)
class LineTally:
    """Mutable per-file counters filled while iterating."""

    lines: int = 0
    malformed: int = 0
    overlong: int = 0


def _skip_rest_of_line(handle: Any) -> None:
    while True:
        chunk = handle.readline(_CHUNK)
        if not chunk or chunk.endswith(b"\n"):
            return


def iter_json_objects(
    path: Path, tally: LineTally, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[dict[str, Any]]:
    """Yield each line of ``path`` that parses as a JSON object."""
    with open(path, "rb") as handle:
        while True:
            raw = handle.readline(max_line_bytes + 1)
            if not raw:
                return
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                tally.lines += 1
                tally.overlong += 1
                _skip_rest_of_line(handle)
                continue
            if not raw.strip():
                continue
            tally.lines += 1
            try:
                record = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                tally.malformed += 1
                continue
            if not isinstance(record, dict):
                tally.malformed += 1
                continue
            yield record
