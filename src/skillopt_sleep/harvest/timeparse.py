"""Parse every timestamp shape transcripts use into an aware UTC ``datetime``.

Accepted: ISO 8601 with ``Z`` or an offset, naive ISO (taken as UTC), a space instead
of ``T``, and epoch numbers in seconds or milliseconds (int, float or numeric string).
Anything else gives ``None``; the caller decides what a missing time means.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

__all__ = ["as_utc", "parse_instant"]

_NUMERIC = re.compile(r"^-?\d+(?:\.\d+)?$")
_MS_THRESHOLD = 1e11  # above this an epoch number is in milliseconds (year 5138 in seconds)
_FRACTION = re.compile(r"(\.\d{1,6})\d+")  # fromisoformat takes at most microseconds


def as_utc(moment: datetime) -> datetime:
    """Naive datetimes are UTC by convention; aware ones are converted to UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _from_epoch(value: float) -> datetime | None:
    if not math.isfinite(value) or value <= 0:
        return None
    if value > _MS_THRESHOLD:
        value /= 1000.0
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def parse_instant(value: object) -> datetime | None:
    """Return ``value`` as an aware UTC instant, or ``None`` if it is not a timestamp."""
    if isinstance(value, bool):
        return None
    if isinstance(value, datetime):
        return as_utc(value)
    if isinstance(value, int | float):
        return _from_epoch(float(value))
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    if _NUMERIC.match(text):
        return _from_epoch(float(text))
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:  # the common shape parses as it is (more than 6 fraction digits are cut, as below)
        return as_utc(datetime.fromisoformat(text))
    except (ValueError, OverflowError):
        pass
    text = _FRACTION.sub(r"\1", text)
    try:
        return as_utc(datetime.fromisoformat(text))
    except (ValueError, OverflowError):  # OverflowError: an offset pushes it past year 1..9999
        return None
