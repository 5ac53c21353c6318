"""The tests themselves: no test draws from an unseeded random number generator.

A draw from the process-wide ``random`` functions or from ``random.Random()`` without a
seed differs run to run, so a test asserting on anything it feeds can fail once in a
hundred runs (issue 32, item 20: a full-jitter delay rounded to 0.0).
"""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import settings

TESTS = Path(__file__).resolve().parents[1]


def unseeded_draws(tree: ast.AST) -> list[int]:
    """Line numbers of ``random.<draw>(...)`` and of ``random.Random()`` without a seed."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        if not (isinstance(owner, ast.Name) and owner.id == "random"):
            continue
        if node.func.attr in {"Random", "SystemRandom"}:
            if node.func.attr == "SystemRandom" or not (node.args or node.keywords):
                found.append(node.lineno)
        elif node.func.attr != "seed":
            found.append(node.lineno)
    return found


def test_unseeded_draws_are_found() -> None:
    sample = "import random\nrandom.random()\nrandom.Random()\nrandom.Random(3).random()\n"
    assert unseeded_draws(ast.parse(sample)) == [2, 3]


def test_no_test_draws_from_an_unseeded_rng() -> None:
    found = [
        f"{path.relative_to(TESTS)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        for line in unseeded_draws(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert found == []


def test_property_tests_are_seeded_and_have_no_deadline() -> None:
    assert settings.default.derandomize is True
    assert settings.default.deadline is None
