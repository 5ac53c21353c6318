"""The HTML report: one page per night and an index across nights, rebuilt from the run files.

A separate renderer over ``report.json`` (plus the proposal and the project's night history),
so the night's own code only calls :func:`skillopt_sleep.html.render.publish_night` once,
after it wrote ``report.md``. The package itself exports only where the pages live
(:mod:`.pages`): ``status`` names them without loading Jinja2 and the views, which load with
:mod:`.render`.
"""

from skillopt_sleep.html.pages import index_path, night_path, project_dir_of, report_pages

__all__ = ["index_path", "night_path", "project_dir_of", "report_pages"]
