"""Read a JSONL transcript line by line in bounded memory, surviving any line.

A line longer than ``max_line_bytes`` is skipped (read through in chunks, never held
whole) and counted. A line that is not a JSON object (including one nested too deep for
the parser) is skipped and counted. Invalid UTF-8 bytes and lone surrogate escapes are
replaced with U+FFFD and the line is kept (and counted). A line whose content a reader
cannot use (:func:`visit_json_objects`) is skipped and counted; the file's other lines
still count. Nothing here raises for bad content: only an unreadable file raises
``OSError``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillopt.logging import get_logger

__all__ = ["DEFAULT_MAX_LINE_BYTES", "LineTally", "iter_json_objects", "visit_json_objects"]

DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024
_CHUNK = 64 * 1024
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# What a reader's handling of a foreign-shaped record can raise; anything else is our bug.
_RECORD_ERRORS = (
    ValueError,
    TypeError,
    AttributeError,
    KeyError,
    IndexError,
    OverflowError,
    RecursionError,
)
_log = get_logger(__name__)


@dataclass(slots=True)
class LineTally:
    """Mutable per-file counters filled while iterating."""

    lines: int = 0
    malformed: int = 0
    overlong: int = 0
    invalid_utf8: int = 0


def _skip_rest_of_line(handle: Any) -> None:
    while True:
        chunk = handle.readline(_CHUNK)
        if not chunk or chunk.endswith(b"\n"):
            return


def _decode(raw: bytes, tally: LineTally) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        tally.invalid_utf8 += 1
        return raw.decode("utf-8", errors="replace")


def _without_surrogates(text: str) -> str:
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _scrub_surrogates(record: dict[str, Any]) -> bool:
    """Replace lone surrogates (valid JSON escapes, unencodable text) in place, iteratively.

    Returns whether anything was replaced.
    """
    replaced = False
    stack: list[dict[str, Any] | list[Any]] = [record]
    while stack:
        node = stack.pop()
        entries = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        for key, value in entries:
            if isinstance(value, dict | list):
                stack.append(value)
            elif isinstance(value, str) and _SURROGATE.search(value):
                node[key] = _without_surrogates(value)  # type: ignore[index]
                replaced = True
            if isinstance(key, str) and _SURROGATE.search(key):
                assert isinstance(node, dict)
                node[_without_surrogates(key)] = node.pop(key)
                replaced = True
    return replaced


def _parse(text: str) -> dict[str, Any] | None:
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        return None
    return record if isinstance(record, dict) else None


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
            bad_bytes = tally.invalid_utf8
            text = _decode(raw, tally)
            record = _parse(text)
            if record is None:
                tally.malformed += 1
                continue
            if _SURROGATE_ESCAPE.search(text) and _scrub_surrogates(record):
                tally.invalid_utf8 = bad_bytes + 1
            yield record


def visit_json_objects(
    path: Path,
    tally: LineTally,
    visit: Callable[[dict[str, Any]], None],
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> None:
    """Call ``visit`` on each JSON object line; a line it cannot use is counted as malformed.

    ``visit`` reads foreign data: a record of an unexpected shape must cost that line only,
    never the session (its other lines still count) or the night.
    """
    for record in iter_json_objects(path, tally, max_line_bytes=max_line_bytes):
        try:
            visit(record)
        except _RECORD_ERRORS as exc:
            tally.malformed += 1
            _log.debug("harvest.line_unusable", path=str(path), error=type(exc).__name__)
