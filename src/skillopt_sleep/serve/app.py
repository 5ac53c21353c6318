"""The dashboard's routes (Starlette): pages from the report's renderer, confirmations,
the actions' POSTs and their status.

Every GET only reads. Every POST has passed :class:`~skillopt_sleep.serve.guard.Guard`
(Host, token, Origin) and must carry its confirmation page's own form token (bound to the
action and its fields, good once) and ``confirm=yes``, which only that form sends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Route

from skillopt.atomicio import read_json_object
from skillopt.errors import SkillOptError
from skillopt.redact import redact_obj
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.html.index_view import index_view
from skillopt_sleep.html.night_view import night_view
from skillopt_sleep.html.render import render_index, render_night, render_page
from skillopt_sleep.rundir import REPORT_JSON
from skillopt_sleep.serve import actions
from skillopt_sleep.serve.guard import Guard
from skillopt_sleep.serve.jobs import Action, Jobs
from skillopt_sleep.serve.projects import Project, find_project, list_projects

__all__ = ["CSP", "build_app"]

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
_RUN_FILES = ("report.md", "report.json")
#: What the dashboard's pages change in the report's page head: their forms post to this
#: server, and a browser sends the ``Origin`` the guard checks only with same-origin.
_PAGE = {"form_action": "'self'", "referrer": "same-origin"}


def _html(text: str, status: int = 200) -> HTMLResponse:
    headers = {"Content-Security-Policy": CSP, "Referrer-Policy": "same-origin"}
    return HTMLResponse(text, status_code=status, headers=headers)


def _message(page_title: str, text: str, status: int) -> HTMLResponse:
    return _html(
        render_page("serve_message.html.j2", page_title=page_title, text=text, **_PAGE), status
    )


class Dashboard:
    def __init__(self, cfg: SleepConfig, guard: Guard, jobs: Jobs) -> None:
        self.cfg, self.guard, self.jobs = cfg, guard, jobs
        self.state_dir = cfg.state_path()

    # -- reading -------------------------------------------------------------------------

    def _project(self, request: Request) -> Project:
        found = find_project(self.state_dir, str(request.path_params["key"]))
        if found is None:
            raise LookupError("no such project in this state directory")
        return found

    def _run(self, project: Project, run_id: str) -> Path:
        found = project.run(run_id)
        if found is None:
            raise LookupError(f"no run {run_id!r} for {project.name}")
        return found

    async def home(self, request: Request) -> Response:
        from skillopt_sleep.commands._runs import pending

        rows = []
        for p in list_projects(self.state_dir):
            runs = p.runs()
            latest = read_json_object(runs[-1] / REPORT_JSON) if runs else {}
            rows.append({
                "key": p.key, "name": p.name, "path": str(p.path or "—"), "runs": len(runs),
                "latest": runs[-1].name if runs else "",
                "latest_status": str(latest.get("status") or "unknown"),
                "pending": any(pending(r) for r in runs),
            })  # fmt: skip
        return _html(render_page(
            "serve_home.html.j2", page_title="skillopt-sleep dashboard", projects=rows,
            state_dir=str(self.state_dir), jobs=self.jobs.all(), **_PAGE,
        ))  # fmt: skip

    def _act(self, project: Project) -> dict[str, Any]:
        from skillopt_sleep import versions
        from skillopt_sleep.commands._runs import kept_edits, pending

        waiting = []
        for run in reversed(project.runs()):
            entries = pending(run)
            if entries:
                waiting.append({
                    "run_id": run.name, "night": read_json_object(run / REPORT_JSON).get("night"),
                    "names": [str(e["name"]) for e in entries], "edits": kept_edits(run),
                })  # fmt: skip
        rows = []
        if project.path is not None:
            rows = [r.to_dict() for r in versions.list_versions(self.cfg, project.path)]
        return {"path": project.path, "name": project.name, "pending": waiting, "versions": rows}

    async def project(self, request: Request) -> Response:
        project = self._project(request)
        view = index_view(project.folder)
        runs = tuple(
            dataclasses.replace(r, link=f"runs/{r.run_id}/" if r.link else "") for r in view.runs
        )
        latest = next((r.link for r in runs if r.link), "")
        view = dataclasses.replace(view, runs=runs, latest_link=latest)
        return _html(render_index(
            view, template="serve_index.html.j2", act=self._act(project),
            jobs=[j for j in self.jobs.all() if j.project == project.key], **_PAGE,
        ))  # fmt: skip

    async def night(self, request: Request) -> Response:
        from skillopt_sleep.commands._runs import kept_edits, pending

        project = self._project(request)
        run = self._run(project, str(request.path_params["run"]))
        act = {
            "key": project.key,
            "run_id": run.name,
            "pending": [str(e["name"]) for e in pending(run)],
            "edits": kept_edits(run),
        }
        return _html(render_night(
            night_view(run), index_link="../../", template="serve_night.html.j2", act=act,
            **_PAGE,
        ))  # fmt: skip

    async def run_file(self, request: Request) -> Response:
        project = self._project(request)
        run = self._run(project, str(request.path_params["run"]))
        name = str(request.path_params["name"])
        if name not in _RUN_FILES or not (run / name).is_file():
            raise LookupError(f"no {name} in this run")
        return FileResponse(run / name, media_type="text/plain; charset=utf-8")

    # -- confirming ----------------------------------------------------------------------

    async def confirm(self, request: Request) -> Response:
        project = self._project(request)
        if project.path is None:
            raise LookupError("this project's state names no folder")
        action = str(request.path_params["action"])
        query = request.query_params
        fields: list[tuple[str, str]] = []
        if action == "night":
            title, verb = f"Start a night for {project.name}?", "Start the night"
            lines = ["It reads the sessions since the last night, replays tasks and may make "
                     "model calls (your [pool] and [budget] settings), as `once` does. Nothing "
                     "live changes: what it learns is staged for you to adopt."]  # fmt: skip
        elif action == "adopt":
            run = self._run(project, query.get("run", ""))
            edits = query.getlist("edit")
            fields = [("run", run.name), *(("edit", e) for e in edits)]
            title, verb, lines = self._adopt_lines(project, run, edits)
        elif action == "restore":
            skill, number = self._version(project, query.get("skill"), query.get("version"))
            fields = [("skill", skill), ("version", str(number))]
            title, verb = f"Restore {skill} v{number}?", f"Restore {skill} v{number}"
            lines = [f"The live {skill} is replaced by version {number} (pinned, the current "
                     "file backed up, a receipt kept), as `versions restore` does."]  # fmt: skip
        else:
            raise LookupError(f"no action {action!r}")
        post_to = f"/p/{project.key}/{action}"
        return _html(render_page(
            "serve_confirm.html.j2", page_title=title, lines=lines, verb=verb, fields=fields,
            token=self.guard.forms.issue(post_to, fields), post_to=post_to,
            back=f"/p/{project.key}/", **_PAGE,
        ))  # fmt: skip

    def _adopt_lines(
        self, project: Project, run: Path, edits: list[str]
    ) -> tuple[str, str, list[str]]:
        from skillopt_sleep.adopt_subset import plan_subset
        from skillopt_sleep.commands._runs import pending
        from skillopt_sleep.rundir import utc_now

        assert project.path is not None
        if edits:
            plan = plan_subset(self.cfg, project.path, run, edits, now=utc_now())  # reads only
            return (
                f"Check and adopt {len(plan.ids)} edit(s) of night {plan.night}?",
                "Check them, and adopt if they pass",
                [plan.cost_line(), "They are adopted only if they pass; the live documents "
                 "are otherwise left as they are."],
            )  # fmt: skip
        entries = pending(run)
        if not entries:
            raise LookupError("this night has no proposal waiting")
        return (
            f"Adopt night {run.name}'s proposal?",
            "Adopt",
            [f"{e['name']} replaces {e['live_path']} (pinned, the current file backed up)."
             for e in entries],
        )  # fmt: skip

    def _version(self, project: Project, skill: str | None, number: str | None) -> tuple[str, int]:
        """A (skill, version) the store holds: never a name the form made up."""
        from skillopt_sleep import versions

        assert project.path is not None
        for row in versions.list_versions(self.cfg, project.path):
            if row.version.name == skill and str(row.version.number) == number:
                return row.version.name, row.version.number
        raise LookupError(f"no version {skill} v{number}")

    # -- acting --------------------------------------------------------------------------

    async def act(self, request: Request) -> Response:
        form = await request.form()
        if form.get("confirm") != "yes":
            return PlainTextResponse("not confirmed: use the confirmation page", status_code=400)
        fields = [(k, str(v)) for k, v in form.multi_items() if k not in {"token", "confirm"}]
        refused = self.guard.forms.redeem(form.get("token"), request.url.path, fields)
        if refused:
            return PlainTextResponse(refused, status_code=403)
        project = self._project(request)
        if project.path is None:
            raise LookupError("this project's state names no folder")
        busy = self.jobs.running(project.key)
        if busy is not None:
            return _message("Busy", f"{busy.title} is still running for this project.", 409)
        action = str(request.path_params["action"])
        path = project.path
        job_action: Action
        if action == "night":
            title, job_action = f"Night for {project.name}", actions.start_night(self.cfg, path)
        elif action == "adopt":
            run = self._run(project, str(form.get("run") or ""))
            edits = [str(e) for e in form.getlist("edit")]
            if edits:
                title = f"Adopt edits {', '.join(edits)} of {run.name}"
                job_action = actions.adopt_chosen(self.cfg, path, run, edits)
            else:
                title = f"Adopt {run.name}"
                job_action = actions.adopt_all(self.cfg, path, run)
        elif action == "restore":
            skill, number = self._version(
                project, str(form.get("skill") or ""), str(form.get("version") or "")
            )
            title = f"Restore {skill} v{number}"
            job_action = actions.restore_version(self.cfg, path, skill, number)
        else:
            raise LookupError(f"no action {action!r}")
        job = self.jobs.start(project.key, title, job_action)
        return RedirectResponse(f"/jobs/{job.ident}", status_code=303)

    async def job(self, request: Request) -> Response:
        ident = str(request.path_params["ident"])
        job = self.jobs.get(ident.removesuffix(".json"))
        if job is None:
            raise LookupError("no such action")
        if ident.endswith(".json"):
            return JSONResponse(redact_obj(job.to_dict()))
        return _html(render_page("serve_job.html.j2", page_title=job.title, job=job, **_PAGE))


def _reading(handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
    """A missing project, run or version is a 404; a refusal of the action's own checks
    (a night kept no edit, a file changed since) is a 409 with its reason."""

    async def wrapped(request: Request) -> Response:
        try:
            response: Response = await handler(request)
        except LookupError as exc:
            return _message("Not found", str(exc), 404)
        except SkillOptError as exc:
            return _message("Refused", str(exc), 409)
        return response

    return wrapped


def build_app(cfg: SleepConfig, guard: Guard, jobs: Jobs) -> Starlette:
    d = Dashboard(cfg, guard, jobs)
    routes = [
        Route("/", _reading(d.home)),
        Route("/p/{key}/", _reading(d.project)),
        Route("/p/{key}/runs/{run}/", _reading(d.night)),
        Route("/p/{key}/runs/{run}/{name}", _reading(d.run_file)),
        Route("/p/{key}/confirm/{action}", _reading(d.confirm)),
        Route("/p/{key}/{action}", _reading(d.act), methods=["POST"]),
        Route("/jobs/{ident}", _reading(d.job)),
    ]
    middleware = [Middleware(BaseHTTPMiddleware, dispatch=guard.middleware)]
    return Starlette(routes=routes, middleware=middleware)
