"""What the index across nights shows: the project's whole learning curve and every run.

The curve comes from the project's night history (``state.json``), completed by the
``report.json`` of any finished night the history does not hold yet (the page is rebuilt at
the end of a night, just before that night is recorded in the history).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillopt.atomicio import read_json_object
from skillopt.errors import SkillOptError
from skillopt_sleep.adopt import adopted_names
from skillopt_sleep.html.night_view import as_float, as_int, score
from skillopt_sleep.html.pages import INDEX_PAGE, NIGHT_PAGE
from skillopt_sleep.html.svgchart import CurvePoint
from skillopt_sleep.night_end import RunStatus
from skillopt_sleep.rundir import PROPOSAL, REPORT_JSON, RUN_JSON, RunDir
from skillopt_sleep.staging import MANIFEST_NAME, RECEIPTS_NAME, load_manifest

__all__ = ["INDEX_PAGE", "NIGHT_PAGE", "IndexView", "RunRow", "WatchedRow", "index_view"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRow:
    night: str
    run_id: str
    started_at: str
    status: str
    result: str
    baseline: str
    candidate: str
    kept: int
    rejected: int
    untested: int
    tasks: int
    link: str  # relative to the index, "" when the run has no page
    proposal: str  # pending | adopted | ""


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexView:
    title: str
    project: str
    curve: tuple[CurvePoint, ...]
    runs: tuple[RunRow, ...]
    latest_link: str
    watched: tuple[WatchedRow, ...] = ()  # the newest night's watched adopted lines


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchedRow:
    """One adopted learned line, and the corrections on its requests before and after."""

    ident: str
    line: str
    target: str
    adopted: str
    before: str
    after: str
    flagged: bool


def _watched_rows(report: Mapping[str, Any]) -> tuple[WatchedRow, ...]:
    rows = []
    for w in report.get("watched_lines") or []:
        before, after = w.get("before") or {}, w.get("after") or {}
        rows.append(
            WatchedRow(
                ident=str(w.get("edit_id", "")),
                line=str(w.get("line", "")),
                target=str(w.get("target", "")),
                adopted=f"night {w.get('night')}, {str(w.get('adopted_at') or '')[:10]}",
                before=f"{as_int(before.get('corrections'))} / {as_int(before.get('sessions'))}",
                after=f"{as_int(after.get('corrections'))} / {as_int(after.get('sessions'))}",
                flagged=bool(w.get("contradicted")),
            )
        )
    return tuple(rows)


def _history_points(state: Mapping[str, Any]) -> dict[int, CurvePoint]:
    points: dict[int, CurvePoint] = {}
    for entry in state.get("history") or []:
        night = as_int(entry.get("night"))
        if night < 1:
            continue
        points[night] = CurvePoint(
            night=night,
            baseline=as_float(entry.get("baseline")),
            candidate=as_float(entry.get("candidate")),
            kept=as_int(entry.get("kept_edits")),
            rejected=as_int(entry.get("rejected_edits")),
            untested=as_int(entry.get("untested_edits")),
        )
    return points


def _report_point(report: Mapping[str, Any]) -> CurvePoint | None:
    """A finished, real (not dry) night's point, the way the history would record it."""
    if (
        report.get("status") != RunStatus.COMPLETE
        or report.get("dry_run")
        or not report.get("night")
    ):
        return None
    return CurvePoint(
        night=as_int(report.get("night")),
        baseline=as_float(report.get("baseline")),
        candidate=as_float(report.get("candidate")),
        kept=len(report.get("accepted_edits") or []),
        rejected=len(report.get("rejected_edits") or []),
        untested=len(report.get("untested_edits") or []),
    )


def _short_time(stamp: Any) -> str:
    """``2026-11-26T03:50:29Z`` -> ``2026-11-26 03:50Z`` (the table stays narrow)."""
    text = str(stamp or "")
    return f"{text[:10]} {text[11:16]}Z" if len(text) >= 16 and text[10] == "T" else text


def _proposal_state(run_dir: Path) -> str:
    """``adopted`` once every document of the proposal is, whether whole or through a
    checked subset of its edits (``adopt --edit``); ``pending`` while one waits."""
    if not (run_dir / PROPOSAL / MANIFEST_NAME).is_file():
        return ""
    try:
        names = {e.name for e in load_manifest(run_dir).entries}
        done = adopted_names(run_dir)
    except SkillOptError:  # an unreadable manifest or receipt: the receipts file decides
        return "adopted" if (run_dir / RECEIPTS_NAME).is_file() else "pending"
    return "adopted" if names <= done else "pending"


def _run_row(run_dir: Path, report: Mapping[str, Any], root: Path) -> RunRow:
    journal = read_json_object(run_dir / RUN_JSON)
    page = run_dir / NIGHT_PAGE
    return RunRow(
        night=str(report.get("night") or journal.get("night") or "—"),
        run_id=run_dir.name,
        started_at=_short_time(report.get("started_at") or journal.get("started_at")),
        status=str(report.get("status") or journal.get("status") or "unknown"),
        result=str(report.get("result") or journal.get("outcome") or ""),
        baseline=score(report.get("baseline")),
        candidate=score(report.get("candidate")),
        kept=len(report.get("accepted_edits") or []),
        rejected=len(report.get("rejected_edits") or []),
        untested=len(report.get("untested_edits") or []),
        tasks=as_int((report.get("tasks") or {}).get("total")),
        link=page.relative_to(root).as_posix() if page.is_file() else "",
        proposal=_proposal_state(run_dir),
    )


def index_view(project_dir: Path) -> IndexView:
    state = read_json_object(project_dir / "state.json")
    points = _history_points(state)
    rows = []
    watched: tuple[WatchedRow, ...] = ()
    for run_dir in RunDir.list_runs(project_dir / "runs"):
        report = read_json_object(run_dir / REPORT_JSON)
        if "watched_lines" in report:
            watched = _watched_rows(report)
        point = _report_point(report)
        if point is not None and point.night not in points:
            points[point.night] = point
        rows.append(_run_row(run_dir, report, project_dir))
    rows.reverse()  # newest first
    project = str(state.get("project") or project_dir.name)
    return IndexView(
        title=f"skillopt nights for {Path(project).name or project}",
        project=project,
        curve=tuple(points[n] for n in sorted(points)),
        runs=tuple(rows),
        latest_link=next((r.link for r in rows if r.link), ""),
        watched=watched,
    )
