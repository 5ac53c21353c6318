"""The one error tree: every exception class skillopt defines is in it, and the drawing in
``skillopt/errors.py``'s docstring is the tree the classes really form."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator

import skillopt
import skillopt_sleep
from skillopt import errors
from skillopt.errors import SkillOptError

# One line of the drawing: the branch glyphs, then a class name.
_DRAWN = re.compile(r"^(?P<indent>[ │├└─]*)(?P<name>[A-Z]\w+)\b")


def _exception_classes() -> Iterator[type[BaseException]]:
    """Every exception class defined in the two packages (private ``_Name`` signals that
    never leave their module excluded)."""
    for package in (skillopt, skillopt_sleep):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            for name, obj in vars(module).items():
                if (
                    inspect.isclass(obj)
                    and issubclass(obj, BaseException)
                    and obj.__module__ == module.__name__
                    and not name.startswith("_")
                ):
                    yield obj


def _drawn_parents() -> dict[str, str | None]:
    """Each class in the docstring's drawing -> the class drawn as its parent."""
    doc = errors.__doc__ or ""
    drawing = doc.split("::", 1)[1]
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in drawing.splitlines():
        match = _DRAWN.match(line.strip("\n").removeprefix("    "))
        if not match:
            continue
        depth = len(match["indent"])
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[match["name"]] = stack[-1][1] if stack else None
        stack.append((depth, match["name"]))
    return parents


def test_every_exception_class_derives_from_the_root() -> None:
    outside = [c.__qualname__ for c in _exception_classes() if not issubclass(c, SkillOptError)]
    assert not outside


def test_every_exception_class_is_drawn_under_its_parent() -> None:
    drawn = _drawn_parents()
    classes = list(_exception_classes())
    assert len(classes) > 20  # the walk found the packages' modules
    for cls in classes:
        assert cls.__name__ in drawn, f"{cls.__module__}.{cls.__name__} is not in the drawing"
        ours = [b for b in cls.__bases__ if issubclass(b, SkillOptError)]
        expected = ours[0].__name__ if ours else None
        assert drawn[cls.__name__] == expected, cls.__name__


def test_the_drawing_names_no_class_that_does_not_exist() -> None:
    names = {c.__name__ for c in _exception_classes()}
    assert set(_drawn_parents()) == names


def test_a_night_and_a_training_run_fail_with_the_same_error() -> None:
    from skillopt_sleep.night import outcome

    assert not hasattr(outcome, "NightFailed")
    failure = errors.RunFailedError("rollout", "every model call failed")
    assert (failure.stage, failure.cause, str(failure)) == (
        "rollout",
        "every model call failed",
        "rollout: every model call failed",
    )
