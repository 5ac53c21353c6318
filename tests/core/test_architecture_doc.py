"""docs/architecture.md is the project's own document: every module under ``src/``, every
file a night writes into its run directory and every stage a night journals is named in it.

A module is named by its file name (``crossfit.py``; a package's ``__init__.py`` by its folder,
``learn/``); a file name several modules share must be named with its folder
(``cli/member.py``) unless the module sits at the top of its package. A stage built by an
f-string is named by its pattern, each replacement field as ``{...}``
(``f"round{round_no}.trial_{target.value}"`` -> ``round{n}.trial_{target}``).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from support.source_tree import SRC, modules, parsed, text

DOC = (SRC.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
SLEEP = SRC / "skillopt_sleep"
# where the run directory's file names live: every upper-case string constant of rundir.py,
# and the named ones of the modules that write into a run directory beside it
RUN_FILE_CONSTANTS = {
    SLEEP / "rundir.py": None,
    SLEEP / "staging.py": ("PROPOSAL_DIR", "MANIFEST_NAME"),
    SLEEP / "html" / "pages.py": ("NIGHT_PAGE",),
}


# every word of the doc that could name a file or a module, trailing punctuation dropped
WORDS = frozenset(w.rstrip(".-") for w in re.findall(r"[\w./-]+", DOC))


def _named(word: str) -> bool:
    """``word`` is a word of the doc, or the end of a longer path the doc writes."""
    return word in WORDS or any(w.endswith("/" + word) for w in WORDS)


def _module_names(path: Path, shared: Counter[str]) -> list[str]:
    """The ways the doc may name the module at ``path``."""
    parts = path.relative_to(SRC).parts
    if path.name == "__init__.py":
        return [f"{parts[-2]}/", ".".join(parts[:-1])]
    names = [f"{parts[-2]}/{path.name}", ".".join((*parts[:-1], path.stem))]
    if shared[path.name] == 1 or len(parts) == 2:
        names.append(path.name)
    return names


def test_every_module_is_in_the_module_map() -> None:
    shared = Counter(p.name for p in modules())
    missing = [
        p.relative_to(SRC).as_posix()
        for p in modules()
        if not any(_named(n) for n in _module_names(p, shared))
    ]
    assert not missing, f"modules not named in docs/architecture.md: {missing}"


def _string_constants(path: Path, only: tuple[str, ...] | None) -> dict[str, str]:
    found = {}
    for node in parsed(path).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            for t in targets:
                if (
                    isinstance(t, ast.Name)
                    and t.id.isupper()
                    and isinstance(value, ast.Constant)
                    and isinstance(value.value, str)
                    and (only is None or t.id in only)
                ):
                    found[t.id] = value.value
    return found


def test_every_run_directory_file_is_in_the_doc() -> None:
    files = {
        f"{path.name}:{name}": value
        for path, only in RUN_FILE_CONSTANTS.items()
        for name, value in _string_constants(path, only).items()
    }
    assert {"run.json", "trials.json", "report.json", "report.html"} <= set(files.values())
    missing = {k: v for k, v in files.items() if not _named(v)}
    assert not missing, f"run-directory files not named in docs/architecture.md: {missing}"


def _pattern(node: ast.expr) -> str | None:
    """A stage name as the doc writes it: a literal, or an f-string with ``{...}`` fields."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value if isinstance(v, ast.Constant) else "{}" for v in node.values
        )  # fmt: skip
    return None


def _resolve(name: str, func: ast.FunctionDef | ast.AsyncFunctionDef, tree: ast.Module) -> list:
    """The values a local name passed to ``begin`` takes: its assignments in the function,
    or, for a parameter, what the module's calls of the function pass."""
    found = [
        _pattern(n.value)
        for n in ast.walk(func)
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
    ]
    params = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
    if name in params:
        at = params.index(name)
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == func.name:
                args = [k.value for k in call.keywords if k.arg == name]
                args += call.args[at : at + 1]
                found += [_pattern(a) for a in args]
    return found


def journalled_stages() -> set[str]:
    stages: set[str] = set()
    for path in modules(SLEEP):
        if ".begin(" not in text(path):
            continue
        tree = parsed(path)
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for call in ast.walk(func):
                if not (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "begin"
                    and call.args
                ):
                    continue
                arg = call.args[0]
                if (
                    func.name == "begin"
                    and isinstance(arg, ast.Name)
                    and arg.id in {a.arg for a in func.args.args}
                ):
                    continue  # a begin that forwards its own stage name names none
                found = (
                    _resolve(arg.id, func, tree) if isinstance(arg, ast.Name) else [_pattern(arg)]
                )
                assert found and None not in found, f"{path}: a stage name the test cannot read"
                stages.update(s for s in found if s)
    return stages


def test_every_journalled_stage_is_in_the_doc() -> None:
    stages = journalled_stages()
    assert {"rollouts", "final", "commit", "round{}.trial_{}"} <= stages, stages
    missing = sorted(
        s
        for s in stages
        if not re.search("`" + r"\{[^}`]*\}".join(re.escape(p) for p in s.split("{}")) + "`", DOC)
    )
    assert not missing, f"stages not named in docs/architecture.md: {missing}"
