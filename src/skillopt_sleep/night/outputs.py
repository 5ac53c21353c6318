"""The files every night leaves in its run directory, whatever way it ended: ``trials.json``,
``diagnostics.json``, ``report.json``, ``report.md`` and ``report.html`` (plus the index
across nights)."""

from __future__ import annotations

from typing import Any

from skillopt.backends.patience import current_patience
from skillopt_sleep import rundir
from skillopt_sleep.night.gather_tasks import Gathered
from skillopt_sleep.night.night_state import Night
from skillopt_sleep.night.report import NightReport
from skillopt_sleep.night.report_markdown import render_markdown

__all__ = ["write_outputs"]


def write_outputs(night: Night, report: NightReport, gathered: Gathered | None) -> None:
    run = night.run
    data = report.to_json()
    run.write_json(rundir.TRIALS, {"trials": data["trials"]})
    diagnostics = {
        "run_id": run.run_id,
        "status": data["status"],
        "failed_stage": data["failed_stage"],
        "reason": data["reason"],
        "pool": _safe_accounting(night),
        "spend": night.spend.summary(),
        "ledger": data["ledger"],
        "rollout_errors": night.replayer.errors.to_list(),
        "reflect": {k: v.to_dict() for k, v in night.reflections.items()},
        "no_edit_reasons": night.no_edit_reasons,
        "gather": gathered.diagnostics if gathered else {},
        "reused_rollouts": night.replayer.reused,
    }
    patience = current_patience()
    if patience is not None:
        diagnostics["outage_patience"] = patience.to_dict()
    run.write_json(rundir.DIAGNOSTICS, diagnostics)
    run.write_json(rundir.REPORT_JSON, data)
    run.write_text(rundir.REPORT_MD, render_markdown(data))
    from skillopt_sleep.html.render import publish_night  # jinja2 and the views: only here

    publish_night(run.path)  # report.html + the index across nights; never raises


def _safe_accounting(night: Night) -> dict[str, Any]:
    try:
        return night.spend.accounting()
    except Exception as exc:  # diagnostics must not sink the night
        return {"error": f"{type(exc).__name__}: {exc}"}
