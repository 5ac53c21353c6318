"""Small modules with one job: no function in src/ over 80 lines, no module over 800."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 800
# Being split where it lives (issue 13, the night package); remove once that lands.
PENDING = {"skillopt_sleep/night.py:run_night"}


def long_functions(path: Path) -> list[str]:
    where = path.relative_to(SRC).as_posix()
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES and f"{where}:{node.name}" not in PENDING:
                found.append(f"{where}:{node.name} ({lines} lines)")
    return found


def test_no_function_is_over_80_lines() -> None:
    assert [f for p in sorted(SRC.rglob("*.py")) for f in long_functions(p)] == []


def test_no_module_is_over_800_lines() -> None:
    sizes = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in SRC.rglob("*.py")}
    assert sorted(str(p.relative_to(SRC)) for p, n in sizes.items() if n > MAX_MODULE_LINES) == []
