"""Items as users have them: JSONL or a JSON array, one file or three, field names mapped.

Layouts (``[env.data]``, paths relative to ``env.data_dir`` when it is set):

- three files: ``train``, ``val``, ``test`` (or, by default, ``train.jsonl`` / ``val.jsonl`` /
  ``test.jsonl``, else ``train.json`` / ... in ``data_dir``);
- one file (``file``, or ``items.jsonl`` / ``items.json`` in ``data_dir``) cut by a seeded
  ratio (``split = "2:1:7"``, ``split_seed``) or by id manifests (``manifests = {train =
  "train_ids.txt", ...}``: one id a line, or a JSON array of ids).

A file ending in ``.json`` holds a JSON array of objects; any other file is JSONL (blank
lines skipped). ``[env.data.fields]`` maps our names (``id``, ``question``, ``answers``,
``choices``, ``context``, ``rubric``, ``files``, ``instructions``, ``task_type``) to the
file's; an item keeps its own fields and gains ours. ``rubric`` may be a text or a list of
criteria, ``files`` a list of names or an object of name -> content (``exec_check``).

Every environment loads its items here: each passes the fields it requires (unless
``[env.data] required`` says otherwise) and an :data:`ItemCheck` of its own, run on every
item after mapping. Every problem is a :class:`~skillopt.errors.DataError` naming the file,
the line and the field.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from skillopt.errors import DataError
from skillopt.trainer.envs.base import EnvItem
from skillopt.types import Split

__all__ = [
    "DataSection",
    "FieldMap",
    "ItemCheck",
    "SplitItems",
    "bundled",
    "data_root",
    "load_splits",
    "parse_ratio",
    "ratio_split",
    "read_items",
    "requiring",
]

_LIST_FIELDS = ("answers", "choices")
_TEXT_FIELDS = ("question", "context", "instructions", "task_type")
_TEXT_OR_LIST = ("rubric",)  # a text, or a list of criteria
_LIST_OR_OBJECT = ("files",)  # a list of names, or an object of name -> content

_QA_REQUIRED = ("question", "answers")

ItemCheck = Callable[[Mapping[str, Any]], str]
"""An environment's check of one mapped item: returns its task type, or raises ValueError
naming the field that is wrong (the loader adds the file and the line)."""


class FieldMap(BaseModel):
    """Our field name -> the name the file uses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = "id"
    question: str = "question"
    answers: str = "answers"
    choices: str = "choices"
    context: str = "context"
    rubric: str = "rubric"
    files: str = "files"
    instructions: str = "instructions"
    task_type: str = "task_type"


class DataSection(BaseModel):
    """Where the items are and how their fields are named (``[env.data]``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str = ""  # one file with every item, cut by `split` or `manifests`
    split: str = ""  # "train:val:test" ratio for the one file, e.g. "2:1:7"
    split_seed: int = 0
    manifests: dict[str, str] = Field(default_factory=dict)  # split -> file of ids
    train: str = ""  # three files (all three or none)
    val: str = ""
    test: str = ""
    fields: FieldMap = Field(default_factory=FieldMap)
    # our names every item must have; None: the environment's (``qa``'s when loaded directly)
    required: tuple[str, ...] | None = None

    @property
    def needs(self) -> tuple[str, ...]:
        return _QA_REQUIRED if self.required is None else self.required

    @field_validator("split")
    @classmethod
    def _ratio(cls, value: str) -> str:
        if value:
            parse_ratio(value)
        return value

    @field_validator("manifests")
    @classmethod
    def _manifest_splits(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - {s.value for s in Split})
        if unknown:
            raise ValueError(f"unknown split(s) {unknown}: use train, val, test")
        return value

    @field_validator("required")
    @classmethod
    def _known_fields(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        unknown = sorted(set(value or ()) - set(FieldMap.model_fields))
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}: use {sorted(FieldMap.model_fields)}")
        return value


def parse_ratio(text: str) -> tuple[float, float, float]:
    """``"2:1:7"`` -> (2, 1, 7); three non-negative numbers with a positive sum."""
    parts = text.split(":")
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 3 or any(not math.isfinite(v) or v < 0 for v in values) or not sum(values):
        raise ValueError(f"split {text!r} must be train:val:test, e.g. '2:1:7'")
    return values[0], values[1], values[2]


def ratio_split(ids: Sequence[str], ratio: str, seed: int) -> dict[Split, list[str]]:
    """Ids shuffled with ``Random(seed)`` and cut by ``ratio`` (largest remainders), each
    split in file order."""
    weights = parse_ratio(ratio)
    order = list(ids)
    random.Random(seed).shuffle(order)
    n, total = len(order), sum(weights)
    exact = [n * w / total for w in weights]
    counts = [math.floor(x) for x in exact]
    for i in sorted(range(3), key=lambda i: (-(exact[i] - counts[i]), i))[: n - sum(counts)]:
        counts[i] += 1
    position = {item_id: k for k, item_id in enumerate(ids)}
    out: dict[Split, list[str]] = {}
    start = 0
    for split, count in zip(Split, counts, strict=True):
        out[split] = sorted(order[start : start + count], key=position.__getitem__)
        start += count
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class _Row:
    line: int
    raw: Any


def _rows(path: Path) -> list[_Row]:
    """The file's records with their line numbers (JSONL, or a JSON array for ``.json``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: unreadable ({exc})") from exc
    if path.suffix == ".json":
        return _array_rows(path, text)
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(_Row(line=lineno, raw=json.loads(line)))
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from exc
    return rows


def _array_rows(path: Path, text: str) -> list[_Row]:
    decoder = json.JSONDecoder()
    pos = _skip(text, 0)
    if not text.startswith("[", pos):
        line = text.count("\n", 0, pos) + 1
        raise DataError(f"{path}:{line}: a .json file must hold a JSON array of items")
    pos = _skip(text, pos + 1)
    rows: list[_Row] = []
    while not text.startswith("]", pos):
        line = text.count("\n", 0, pos) + 1
        try:
            raw, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from exc
        rows.append(_Row(line=line, raw=raw))
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
        elif not text.startswith("]", pos):
            where = text.count("\n", 0, pos) + 1
            raise DataError(f"{path}:{where}: expected ',' or ']' after an item")
    return rows


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _as_text_list(value: Any) -> list[str] | None:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return [str(value)]
    if isinstance(value, list) and all(
        isinstance(v, str | int | float) and not isinstance(v, bool) for v in value
    ):
        return [str(v) for v in value]
    return None


def _item(
    path: Path, row: _Row, spec: DataSection, position: int, check: ItemCheck | None
) -> EnvItem:
    where = f"{path}:{row.line}"
    if not isinstance(row.raw, dict):
        raise DataError(f"{where}: an item must be a JSON object")
    names = spec.fields
    raw: dict[str, Any] = row.raw
    data = dict(raw)
    for ours in (*_TEXT_FIELDS, *_LIST_FIELDS, *_TEXT_OR_LIST, *_LIST_OR_OBJECT):
        theirs = getattr(names, ours)
        if theirs not in raw or raw[theirs] is None:
            if ours in spec.needs:
                raise DataError(f"{where}: field {_name(ours, theirs)} is missing")
            data.pop(ours, None)
            continue
        data[ours] = _field(where, ours, _name(ours, theirs), raw[theirs], spec)
    item_id = raw.get(names.id)
    if item_id is None and names.id not in raw:
        item_id = f"{path.stem}-{position + 1}" if "id" not in spec.needs else None
    if isinstance(item_id, bool) or not isinstance(item_id, str | int) or str(item_id) == "":
        raise DataError(f"{where}: field {_name('id', names.id)} must be a string or integer")
    data["id"] = str(item_id)
    task_type = str(data.get("task_type") or "qa")
    if check is not None:
        try:
            task_type = check(data)
        except ValueError as exc:
            raise DataError(f"{where}: {exc}") from None
    return EnvItem(id=str(item_id), task_type=task_type, data=data)


def _field(where: str, ours: str, named: str, value: Any, spec: DataSection) -> Any:
    """One of our fields in its normal shape (strings, or lists of strings)."""
    is_text = isinstance(value, str | int | float) and not isinstance(value, bool)
    if ours in _TEXT_FIELDS or (ours in _TEXT_OR_LIST and not isinstance(value, list)):
        if is_text:
            return str(value)
        raise DataError(f"{where}: field {named} must be a string, got {_preview(value)}")
    if ours in _LIST_OR_OBJECT and isinstance(value, dict):
        return value  # name -> content; the environment checks the entries
    listed = _as_text_list(value)
    if listed is None or (ours in spec.needs and not listed):
        raise DataError(
            f"{where}: field {named} must be a string or a non-empty list of strings, "
            f"got {_preview(value)}"
        )
    return listed


def _name(ours: str, theirs: str) -> str:
    return repr(ours) if ours == theirs else f"{ours!r} (mapped to {theirs!r})"


def _preview(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_items(path: Path, spec: DataSection, check: ItemCheck | None = None) -> list[EnvItem]:
    """Every item of one file, in file order; duplicate ids are an error."""
    items: list[EnvItem] = []
    seen: dict[str, int] = {}
    for position, row in enumerate(_rows(path)):
        item = _item(path, row, spec, position, check)
        if item.id in seen:
            raise DataError(
                f"{path}:{row.line}: duplicate id {item.id!r} (first on line {seen[item.id]})"
            )
        seen[item.id] = row.line
        items.append(item)
    return items


def _manifest_ids(path: Path) -> list[tuple[int, str]]:
    """(line, id) of a manifest: one id a line, or a JSON array of ids."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: manifest not found") from None
    if text.lstrip().startswith("["):
        return [
            (row.line, str(row.raw))
            for row in _array_rows(path, text)
            if isinstance(row.raw, str | int) and not isinstance(row.raw, bool)
        ]
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def _by_manifests(
    items: list[EnvItem], manifests: Mapping[str, Path]
) -> dict[Split, list[EnvItem]]:
    by_id = {item.id: item for item in items}
    owner: dict[str, Path] = {}
    out: dict[Split, list[EnvItem]] = {split: [] for split in Split}
    for split in Split:
        path = manifests.get(split.value)
        if path is None:
            continue
        for line, item_id in _manifest_ids(path):
            if item_id not in by_id:
                raise DataError(f"{path}:{line}: id {item_id!r} is not in the items file")
            if item_id in owner:
                raise DataError(f"{path}:{line}: id {item_id!r} is also listed in {owner[item_id]}")
            owner[item_id] = path
            out[split].append(by_id[item_id])
    return out


def _resolve(root: Path | None, name: str) -> Path:
    path = Path(name)
    return path if root is None or path.is_absolute() else root / path


def _default_files(root: Path) -> dict[Split, Path] | None:
    for suffix in (".jsonl", ".json"):
        files = {split: root / f"{split.value}{suffix}" for split in Split}
        if all(p.is_file() for p in files.values()):
            return files
    return None


def _single_file(root: Path) -> Path | None:
    for name in ("items.jsonl", "items.json"):
        if (root / name).is_file():
            return root / name
    return None


def load_splits(
    data_dir: str | Path,
    spec: DataSection,
    *,
    default_dir: Path,
    limit: int = 0,
    check: ItemCheck | None = None,
) -> dict[Split, list[EnvItem]]:
    """The three splits ``spec`` describes (``default_dir`` when nothing is set), every
    item passed through ``check``."""
    root = Path(data_dir) if data_dir else None
    three = [spec.train, spec.val, spec.test]
    if any(three) and not all(three):
        raise DataError("env.data: give all three of train, val and test, or none")
    single = _resolve(root, spec.file) if spec.file else None
    if single is None and all(three):
        files = {split: _resolve(root, name) for split, name in zip(Split, three, strict=True)}
        splits = {split: read_items(path, spec, check) for split, path in files.items()}
    elif single is None:
        base = root or default_dir
        found = _default_files(base)
        if found is not None:
            splits = {split: read_items(path, spec, check) for split, path in found.items()}
        else:
            single = _single_file(base)
            if single is None:
                raise DataError(
                    f"{base}: no train/val/test .jsonl or .json files and no items.jsonl or "
                    "items.json (or set env.data.file)"
                )
    if single is not None:
        splits = _split_one(root, single, spec, check)
    if limit:
        splits = {split: items[:limit] for split, items in splits.items()}
    _check_disjoint(splits)
    return splits


def _split_one(
    root: Path | None, path: Path, spec: DataSection, check: ItemCheck | None
) -> dict[Split, list[EnvItem]]:
    items = read_items(path, spec, check)
    if spec.manifests:
        manifests = {name: _resolve(root, p) for name, p in spec.manifests.items()}
        return _by_manifests(items, manifests)
    if not spec.split:
        raise DataError(
            f"{path}: one file holds every item; set env.data.split (e.g. '2:1:7') or "
            "env.data.manifests to cut it into train, val and test"
        )
    by_id = {item.id: item for item in items}
    ids = ratio_split([item.id for item in items], spec.split, spec.split_seed)
    return {split: [by_id[i] for i in chosen] for split, chosen in ids.items()}


def _check_disjoint(splits: Mapping[Split, Sequence[EnvItem]]) -> None:
    owner: dict[str, Split] = {}
    for split, items in splits.items():
        for item in items:
            if item.id in owner:
                raise DataError(
                    f"id {item.id!r} is in both the {owner[item.id].value} and the "
                    f"{split.value} split"
                )
            owner[item.id] = split


def bundled(name: str) -> Path:
    """A sample dataset shipped with the package (``trainer/envs/data/<name>``)."""
    return Path(str(resources.files("skillopt.trainer.envs").joinpath("data", name)))


def requiring(spec: DataSection | None, *fields: str) -> DataSection:
    """``spec`` requiring ``fields`` of every item, unless the config set ``required``."""
    spec = spec or DataSection()
    if spec.required is not None:
        return spec
    return spec.model_copy(update={"required": tuple(fields)})


def data_root(data_dir: str | Path, spec: DataSection, default_dir: Path) -> Path:
    """The directory an item's relative paths (input files, checkers) are read from:
    ``data_dir``, else the folder of the configured file, else ``default_dir``."""
    if data_dir:
        return Path(data_dir)
    named = spec.file or spec.train
    return Path(named).resolve().parent if named else default_dir


class SplitItems:
    """The ``items`` / ``task_types`` half of an environment, over loaded splits."""

    def __init__(self, splits: Mapping[Split, list[EnvItem]]) -> None:
        self._splits = dict(splits)

    def items(self, split: Split) -> Sequence[EnvItem]:
        return self._splits[split]

    def task_types(self) -> list[str]:
        return sorted({item.task_type for items in self._splits.values() for item in items})
