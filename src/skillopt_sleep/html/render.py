"""Render the night page and the index with Jinja2 and write them atomically.

Every value a template prints goes through :func:`skillopt.redact.sanitize` (the
environment's ``finalize``) and is then HTML-escaped (``autoescape``); the finished page is
sanitized once more as a whole. The pages are static: inline CSS and SVG, no script, and a
Content-Security-Policy that forbids loading anything, so they open from disk with no network.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from skillopt.atomicio import atomic_write_text
from skillopt.logging import get_logger
from skillopt.redact import sanitize
from skillopt_sleep.html.index_view import IndexView, index_view
from skillopt_sleep.html.night_view import Lenient, NightView, night_view, score
from skillopt_sleep.html.pages import index_path, night_path, project_dir_of
from skillopt_sleep.html.svgchart import learning_curve

__all__ = [
    "build_index",
    "build_night",
    "publish_night",
    "render_index",
    "render_night",
    "render_page",
]

_log = get_logger(__name__)


def _finalize(value: Any) -> Any:
    if isinstance(value, Markup):
        return value  # built by us from numbers and escaped labels (the chart, macros)
    if value is None:
        return ""
    if isinstance(value, str):
        return sanitize(value)
    return value


@cache
def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("skillopt_sleep.html", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.globals["score"] = score
    env.globals["blank"] = Lenient()
    return env


def render_page(template: str, **context: Any) -> str:
    """Any page of the report's templates (the dashboard's own extend them)."""
    return sanitize(_env().get_template(template).render(**context))


def render_night(
    view: NightView, *, index_link: str, template: str = "night.html.j2", **extra: Any
) -> str:
    return render_page(
        template,
        v=view,
        page_title=view.title,
        index_link=index_link,
        chart=learning_curve(view.curve, title="Learning curve, recent nights"),
        **extra,
    )


def render_index(view: IndexView, *, template: str = "index.html.j2", **extra: Any) -> str:
    return render_page(
        template,
        v=view,
        page_title=view.title,
        chart=learning_curve(view.curve, title="Learning curve over every night"),
        **extra,
    )


def build_night(run_dir: Path) -> Path:
    """(Re)write ``<run_dir>/report.html`` from the run's files."""
    index = Path(os.path.relpath(index_path(project_dir_of(run_dir)), run_dir)).as_posix()
    html = render_night(night_view(run_dir), index_link=index)
    path = night_path(run_dir)
    atomic_write_text(path, html)
    return path


def build_index(project_dir: Path) -> Path:
    """(Re)write ``<project_dir>/index.html``: the curve over every recorded night."""
    html = render_index(index_view(project_dir))
    path = index_path(project_dir)
    atomic_write_text(path, html)
    return path


def publish_night(run_dir: Path) -> Path | None:
    """The night page and the refreshed index, for the end of a night.

    Never raises: the HTML is a view of files already written, and failing to draw it must
    not fail the night (``skillopt-sleep report`` can rebuild it later).
    """
    try:
        page = build_night(run_dir)
        build_index(project_dir_of(run_dir))
    except Exception as exc:
        _log.warning(
            "report.html_failed", run_dir=str(run_dir), error=f"{type(exc).__name__}: {exc}"
        )
        return None
    return page
