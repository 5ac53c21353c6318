"""A night's kept edit by a short id: what ``status`` and the report show, and what
``adopt --edit ID`` names. The id is a hash of the edit itself (target, op, anchor,
content), so a report written before ids existed names its edits the same way."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from skillopt.types import EditRecord

__all__ = ["edit_id", "with_id"]

ID_CHARS = 6


def edit_id(edit: EditRecord | Mapping[str, Any]) -> str:
    data = edit.to_dict() if isinstance(edit, EditRecord) else edit
    raw = "\x1f".join(str(data.get(k) or "").strip() for k in ("target", "op", "anchor", "content"))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:ID_CHARS]


def with_id(edit: EditRecord) -> dict[str, Any]:
    """The edit's JSON form with its id."""
    return {"id": edit_id(edit), **edit.to_dict()}
