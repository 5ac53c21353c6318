"""Item files for the bundled environments beyond ``qa``: ``train.jsonl``, ``val.jsonl`` and
``test.jsonl`` in one directory, each line one JSON object with a unique ``id``; an
environment checks its own fields with a function that names the field it rejects."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from skillopt.errors import DataError
from skillopt.trainer.envs.base import EnvItem, Split

__all__ = ["ItemCheck", "SplitItems", "bundled", "load_splits"]

#: Returns the item's task type, or raises ValueError naming the field that is wrong.
ItemCheck = Callable[[Mapping[str, Any]], str]


def bundled(name: str) -> Path:
    """A sample dataset shipped with the package (``envs/data/<name>``)."""
    return Path(str(resources.files("skillopt.trainer.envs").joinpath("data", name)))


def _load(path: Path, check: ItemCheck, limit: int) -> list[EnvItem]:
    if not path.is_file():
        raise DataError(f"{path}: split file not found")
    items: list[EnvItem] = []
    seen: set[str] = set()
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from exc
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str | int):
            raise DataError(f"{path}:{lineno}: an item must be a JSON object with an 'id'")
        item_id = str(raw["id"])
        if item_id in seen:
            raise DataError(f"{path}:{lineno}: duplicate id {item_id!r}")
        try:
            task_type = check(raw)
        except ValueError as exc:
            raise DataError(f"{path}:{lineno}: {exc}") from exc
        seen.add(item_id)
        items.append(EnvItem(id=item_id, task_type=task_type, data=raw))
        if limit and len(items) >= limit:
            break
    return items


def load_splits(root: Path, check: ItemCheck, *, limit: int = 0) -> dict[Split, list[EnvItem]]:
    return {split: _load(root / f"{split.value}.jsonl", check, limit) for split in Split}


class SplitItems:
    """The ``items`` / ``task_types`` half of an environment, over loaded splits."""

    def __init__(self, splits: Mapping[Split, list[EnvItem]]) -> None:
        self._splits = dict(splits)

    def items(self, split: Split) -> Sequence[EnvItem]:
        return self._splits[split]

    def task_types(self) -> list[str]:
        return sorted({item.task_type for items in self._splits.values() for item in items})
