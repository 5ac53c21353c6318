"""The HTML report: one page per night and an index across nights, rebuilt from the run files.

A separate renderer over ``report.json`` (plus the proposal and the project's night history),
so the night's own code only calls :func:`publish_night` once, after it wrote ``report.md``.
The renderer (Jinja2 and the views) loads on first use: ``status`` only needs the paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skillopt_sleep.html.pages import index_path, night_path, project_dir_of, report_pages

if TYPE_CHECKING:
    from skillopt_sleep.html.render import build_index, build_night, publish_night

__all__ = [
    "build_index",
    "build_night",
    "index_path",
    "night_path",
    "project_dir_of",
    "publish_night",
    "report_pages",
]

_RENDERED = frozenset({"build_index", "build_night", "publish_night"})


def __getattr__(name: str) -> Any:
    if name in _RENDERED:
        from skillopt_sleep.html import render

        return getattr(render, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
