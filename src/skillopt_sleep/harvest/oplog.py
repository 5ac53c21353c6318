"""Replay an append-only JSON operation log (VS Code's chat sessions) in bounded memory.

Each line is one entry, applied in file order:

- ``{"kind": 0, "v": state}``: the whole state (the first line; a later one replaces all);
- ``{"kind": 1, "k": path, "v": value}``: set the value at ``path``;
- ``{"kind": 2, "k": path, "v": [items], "i": index}``: the array at ``path`` (created when
  missing) is cut to ``index`` items when ``i`` is given, then ``items`` are appended;
- ``{"kind": 3, "k": path}``: delete the value at ``path``.

A path is a list of object keys and array indexes. Values are pruned as they land, to the
fields a :class:`Shape` keeps (strings clipped, arrays capped with placeholders so later
entries still find their positions). An entry whose path leads into a pruned field is a
no-op; one whose path does not exist in the kept state is a bad record (counted). An entry
that replaces the root (an empty path) is applied like ``kind`` 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from skillopt_sleep.harvest.lines import LineTally

__all__ = ["LEAF", "MAX_ITEMS", "MAX_STRING", "WHOLE", "Key", "Shape", "prune", "replay"]

INITIAL, SET, PUSH, DELETE = 0, 1, 2, 3
MAX_STRING = 16 * 1024
MAX_ITEMS = 512

Key = str | int


@dataclass(frozen=True, slots=True)
class Shape:
    """What to keep of a value: ``fields`` of an object (each with its own shape), the
    ``items`` shape of an array, or the value itself when neither (a leaf: scalars kept,
    strings clipped, containers dropped unless ``whole``)."""

    fields: Mapping[str, Shape] = field(default_factory=dict)
    items: Shape | None = None
    whole: bool = False

    @property
    def is_leaf(self) -> bool:
        return not self.fields and self.items is None


LEAF = Shape()
WHOLE = Shape(whole=True)  # small objects kept as they are (clipped strings inside)


def _clip_all(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return value[:MAX_STRING]
    if depth > 4:
        return None
    if isinstance(value, dict):
        return {str(k): _clip_all(v, depth + 1) for k, v in list(value.items())[:32]}
    if isinstance(value, list):
        return [_clip_all(v, depth + 1) for v in value[:32]]
    return value


def prune(value: Any, shape: Shape) -> Any:
    """``value`` reduced to ``shape``."""
    if shape.whole:
        return _clip_all(value)
    if shape.items is not None:
        if not isinstance(value, list):
            return None
        return [prune(v, shape.items) if i < MAX_ITEMS else None for i, v in enumerate(value)]
    if shape.fields:
        if not isinstance(value, dict):
            return None
        return {k: prune(value[k], s) for k, s in shape.fields.items() if k in value}
    if isinstance(value, str):
        return value[:MAX_STRING]
    return value if isinstance(value, int | float | bool) or value is None else None


class _Pruned(Exception):
    """The path leads into a field the shape drops: the entry changes nothing we keep."""


class _Missing(Exception):
    """The path does not exist in the state: a bad record."""


def _shape_at(shape: Shape, path: list[Key]) -> Shape:
    for key in path:
        if shape.items is not None and isinstance(key, int) and not isinstance(key, bool):
            if key >= MAX_ITEMS:
                raise _Pruned
            shape = shape.items
        elif shape.fields and isinstance(key, str):
            if key not in shape.fields:
                raise _Pruned
            shape = shape.fields[key]
        elif shape.whole:
            raise _Pruned  # inside a small object kept whole: not worth patching
        else:
            raise _Missing
    return shape


def _container(state: Any, path: list[Key]) -> Any:
    node = state
    for key in path:
        in_object = isinstance(node, dict) and isinstance(key, str) and key in node
        in_array = isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node)
        if not (in_object or in_array):
            raise _Missing
        node = node[key]
        if node is None:
            raise _Missing
    return node


def _set(state: Any, path: list[Key], value: Any) -> None:
    parent, key = _container(state, path[:-1]), path[-1]
    if isinstance(parent, dict) and isinstance(key, str):
        parent[key] = value
    elif isinstance(parent, list) and isinstance(key, int) and 0 <= key <= len(parent):
        if key == len(parent):
            parent.append(value)
        else:
            parent[key] = value
    else:
        raise _Missing


def _delete(state: Any, path: list[Key]) -> None:
    parent, key = _container(state, path[:-1]), path[-1]
    if isinstance(parent, dict) and isinstance(key, str):
        parent.pop(key, None)
    elif isinstance(parent, list) and isinstance(key, int) and 0 <= key < len(parent):
        parent[key] = None
    else:
        raise _Missing


def _push(state: Any, path: list[Key], items: Any, cut: Any, shape: Shape) -> None:
    parent, key = _container(state, path[:-1]), path[-1]
    if isinstance(parent, dict) and isinstance(key, str):
        array = parent.get(key)
        if array is None:
            array = parent[key] = []
    elif isinstance(parent, list) and isinstance(key, int) and 0 <= key < len(parent):
        array = parent[key]
        if array is None:
            array = parent[key] = []
    else:
        raise _Missing
    if not isinstance(array, list):
        raise _Missing
    if isinstance(cut, int) and not isinstance(cut, bool) and cut >= 0:
        del array[cut:]
    item_shape = shape.items or LEAF
    for value in items if isinstance(items, list) else ():
        array.append(prune(value, item_shape) if len(array) < MAX_ITEMS else None)


def _path(entry: Mapping[str, Any]) -> list[Key] | None:
    raw = entry.get("k")
    if not isinstance(raw, list) or not all(
        isinstance(k, str) or (isinstance(k, int) and not isinstance(k, bool)) for k in raw
    ):
        return None
    return list(raw)


def replay(entries: Iterable[dict[str, Any]], shape: Shape, tally: LineTally) -> Any:
    """The final state of the log, pruned to ``shape`` (``None`` when it never had one)."""
    state: Any = None
    for entry in entries:
        kind = entry.get("kind")
        path = _path(entry) if kind != INITIAL else []
        if path is None or kind not in (INITIAL, SET, PUSH, DELETE):
            tally.malformed += 1
            continue
        if not path and kind in (INITIAL, SET):
            state = prune(entry.get("v"), shape)
            continue
        try:
            target = _shape_at(shape, path)
            if state is None or not path:
                raise _Missing
            if kind == SET:
                _set(state, path, prune(entry.get("v"), target))
            elif kind == PUSH:
                _push(state, path, entry.get("v"), entry.get("i"), target)
            else:
                _delete(state, path)
        except _Pruned:
            continue
        except _Missing:
            tally.malformed += 1
    return state
