"""Import the openai SDK without loading every type package it re-exports.

``import openai`` runs ``openai/types/__init__.py`` (and the ``__init__`` of every
``openai.types`` sub-package it touches, such as ``responses``), which imports hundreds of
pydantic models for evals, graders, realtime and so on: about 0.3 s of CPU at every start,
although a chat call needs a handful of them. :func:`import_openai` installs a finder that
loads each ``openai.types`` *package* as a lazy module: a name is resolved (by importing
the one submodule the real ``__init__`` would import it from) when something asks for it.
Anything the real ``__init__`` does that we cannot map (a star import, a name defined in
the ``__init__`` itself) falls back to running the real ``__init__``, so the worst case is
today's full import, never a missing name.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["import_openai"]

_LAZY_ROOT = "openai.types"


def _relative_names(init: Path) -> dict[str, str] | None:
    """``name -> submodule`` for every ``from .sub import name`` in ``init``; ``None``
    when the file does anything else at the top level we would have to run."""
    try:
        tree = ast.parse(init.read_bytes())
    except (OSError, SyntaxError):
        return None
    where: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                if alias.name == "*":
                    return None
                where[alias.asname or alias.name] = node.module
        elif isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        else:
            return None
    return where


class _LazyPackageLoader(importlib.abc.Loader):
    """Create the package module empty; resolve its re-exported names on first use."""

    def __init__(self, where: dict[str, str], real: importlib.machinery.ModuleSpec) -> None:
        self._where = where
        self._real = real

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        where, real, name = self._where, self._real, module.__name__

        def resolve(attr: str) -> Any:
            sub = where.get(attr)
            if sub is not None:
                value = getattr(importlib.import_module(f"{name}.{sub}"), attr)
                setattr(module, attr, value)
                return value
            if attr.startswith("__"):
                raise AttributeError(attr)
            try:
                return importlib.import_module(f"{name}.{attr}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{name}.{attr}":
                    raise
            # Not a submodule either: run the real __init__ and look again.
            assert real.loader is not None
            real.loader.exec_module(module)
            try:
                return module.__dict__[attr]
            except KeyError:
                raise AttributeError(f"module {name!r} has no attribute {attr!r}") from None

        module.__getattr__ = resolve  # type: ignore[method-assign]


class _LazyTypesFinder(importlib.abc.MetaPathFinder):
    """Serves ``openai.types`` and its sub-packages lazily; other names pass through."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _LAZY_ROOT and not fullname.startswith(_LAZY_ROOT + "."):
            return None
        real = importlib.machinery.PathFinder.find_spec(fullname, path)
        if real is None or real.submodule_search_locations is None or real.origin is None:
            return None  # a plain module: import it as usual
        where = _relative_names(Path(real.origin))
        if where is None:
            return None
        spec = importlib.machinery.ModuleSpec(
            fullname,
            _LazyPackageLoader(where, real),
            origin=real.origin,
            is_package=True,
        )
        spec.submodule_search_locations = real.submodule_search_locations
        spec.has_location = True
        return spec


_FINDER = _LazyTypesFinder()


def import_openai() -> types.ModuleType:
    """The ``openai`` module, imported with lazy ``openai.types`` packages the first time."""
    if "openai" not in sys.modules and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    return importlib.import_module("openai")
