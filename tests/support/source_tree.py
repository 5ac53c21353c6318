"""The source tree, read once per test session for the static checks.

``tests/core/test_code_shape.py`` and ``tests/core/test_architecture.py`` ask many questions
of the same files; every answer here is cached, so each module is read, parsed and walked
once however many tests (and test modules) ask.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


@functools.cache
def modules(root: Path = SRC) -> tuple[Path, ...]:
    """Every ``.py`` file under ``root``, sorted."""
    if root != SRC:
        return tuple(p for p in modules() if p.is_relative_to(root))
    return tuple(sorted(SRC.rglob("*.py")))


@functools.cache
def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(text(path))


@functools.cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the module, in ``ast.walk`` order."""
    return tuple(ast.walk(parsed(path)))


def where(path: Path) -> str:
    """``path`` relative to src/, with forward slashes (``skillopt/pool.py``)."""
    return path.relative_to(SRC).as_posix()


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")


@functools.cache
def imports(path: Path) -> tuple[str, ...]:
    """Every absolute module ``path`` imports, at any depth (lazy imports inside functions
    count)."""
    found: list[str] = []
    for node in nodes(path):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(node.module)
    return tuple(found)


@functools.cache
def arrows(root: Path = SRC) -> tuple[tuple[str, str], ...]:
    """(importer, imported) for every import in every module under ``root``."""
    return tuple((module_name(p), target) for p in modules(root) for target in imports(p))
