"""The HTML report: one page per night and an index across nights, rebuilt from the run files.

A separate renderer over ``report.json`` (plus the proposal and the project's night history),
so the night's own code only calls :func:`publish_night` once, after it wrote ``report.md``.
"""

from skillopt_sleep.html.render import (
    build_index,
    build_night,
    index_path,
    night_path,
    project_dir_of,
    publish_night,
    report_pages,
)

__all__ = [
    "build_index",
    "build_night",
    "index_path",
    "night_path",
    "project_dir_of",
    "publish_night",
    "report_pages",
]
