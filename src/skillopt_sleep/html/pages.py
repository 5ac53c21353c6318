"""Where a project's report pages live (no rendering: ``status`` and the agent summary read
these without loading Jinja2)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "INDEX_PAGE",
    "NIGHT_PAGE",
    "index_path",
    "night_path",
    "project_dir_of",
    "report_pages",
]

NIGHT_PAGE = "report.html"
INDEX_PAGE = "index.html"


def project_dir_of(run_dir: Path) -> Path:
    """``<project_dir>/runs/<run>`` -> ``<project_dir>``."""
    return run_dir.parent.parent


def index_path(project_dir: Path) -> Path:
    return project_dir / INDEX_PAGE


def night_path(run_dir: Path) -> Path:
    return run_dir / NIGHT_PAGE


def report_pages(runs: Sequence[Path]) -> dict[str, str | None]:
    """The index across nights and the latest run's page, where they exist (for status)."""
    if not runs:
        return {"report_index": None, "latest_report": None}
    index = index_path(project_dir_of(runs[-1]))
    page = night_path(runs[-1])
    return {
        "report_index": str(index) if index.is_file() else None,
        "latest_report": str(page) if page.is_file() else None,
    }
