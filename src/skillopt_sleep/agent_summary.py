"""What an agent is told about the nights: status, the last night's lesson, the pending diff.

Plain data built from the same files and helpers the CLI uses (run journals, ``report.json``,
the proposal manifest), so the MCP server is a thin layer over it and the answers match what
``status``, ``report`` and ``adopt`` say. Every string is redacted before it leaves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skillopt.atomicio import read_json_object
from skillopt.redact import redact_obj
from skillopt_sleep.commands._runs import pending, project_runs, run_summary
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.html import night_path, report_pages
from skillopt_sleep.html.docdiff import proposal_diffs, unified_text
from skillopt_sleep.html.night_view import as_float, summary_lines
from skillopt_sleep.state import StateStore

__all__ = ["RECENT", "night_summary", "pending_diff", "status_data"]

RECENT = 5


def status_data(cfg: SleepConfig, project: Path) -> dict[str, Any]:
    """Nights run, the recent ones with their scores, proposals waiting, report pages."""
    runs = project_runs(cfg, project)
    recent = []
    for run in runs[-RECENT:]:
        report = read_json_object(run / "report.json")
        recent.append(
            {
                **run_summary(run),
                "adopted_docs_score": as_float(report.get("baseline")),
                "staged_docs_score": as_float(report.get("candidate")),
                "kept_edits": len(report.get("accepted_edits") or []),
            }
        )
    data = {
        "project": str(project),
        "nights_run": StateStore(cfg.state_path()).load(project).night,
        "recent_nights": recent,
        "pending_proposals": [e for run in runs for e in pending(run)],
        **report_pages(runs),
    }
    return dict(redact_obj(data))


def _intents(report: dict[str, Any], ids: list[Any]) -> list[str]:
    intents = report.get("task_intents") or {}
    return [str(intents.get(str(i)) or i) for i in ids]


def night_summary(run_dir: Path) -> dict[str, Any]:
    """What one night learned: kept edits first, then what it measured and what it cost."""
    r = read_json_object(run_dir / "report.json")
    deltas = r.get("task_deltas") or []
    spend = r.get("spend") or {}
    page = night_path(run_dir)
    data = {
        "night": r.get("night"),
        "run_id": r.get("run_id") or run_dir.name,
        "run_dir": str(run_dir),
        "started_at": r.get("started_at"),
        "status": r.get("status"),
        "result": r.get("result"),
        "summary": " ".join(summary_lines(r)) if r else "this run left no report.json",
        "learned": [
            {"target": e.get("target"), "edit": e.get("content"), "why": e.get("rationale")}
            for e in r.get("accepted_edits") or []
        ],
        "rejected_by_gate": [e.get("content") for e in r.get("rejected_edits") or []],
        "untested": [(c.get("edit") or {}).get("content") for c in r.get("untested_edits") or []],
        "score": {
            "metric": r.get("metric"),
            "adopted_documents": as_float(r.get("baseline")),
            "tonights_documents": as_float(r.get("candidate")),
            "gate_decision": r.get("gate_action"),
        },
        "tasks_improved": _intents(r, [d.get("task_id") for d in deltas
                                       if d.get("status") == "improved"]),
        "tasks_regressed": _intents(r, [d.get("task_id") for d in deltas
                                        if d.get("status") == "regressed"]),
        "test_split": r.get("test"),
        "spend": {k: spend.get(k) for k in ("calls", "tokens", "failures", "budget_reached")},
        "proposal_waiting": [e["name"] for e in pending(run_dir)],
        "report_html": str(page) if page.is_file() else None,
        "report_md": str(run_dir / "report.md"),
    }  # fmt: skip
    return dict(redact_obj(data))


def pending_diff(run_dir: Path) -> dict[str, Any]:
    """The run's staged documents not adopted yet, against the live files, as a diff."""
    waiting = {e["name"] for e in pending(run_dir)}
    diffs = [d for d in proposal_diffs(run_dir) if d.name in waiting]
    data = {
        "run_id": run_dir.name,
        "run_dir": str(run_dir),
        "files": [
            {
                "name": d.name,
                "kind": d.kind,
                "live_path": d.live_path,
                "state": d.state,
                "added_lines": d.added,
                "removed_lines": d.removed,
                "compared_with": d.compared_with,
            }
            for d in diffs
        ],
        "diff": unified_text(diffs),
        "adoptable": bool(diffs) and all(d.state == "pending" for d in diffs),
    }
    return dict(redact_obj(data))
