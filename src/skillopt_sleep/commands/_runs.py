"""Reading past nights for ``status`` and ``adopt``: run journals and pending proposals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from skillopt.atomicio import read_json_object
from skillopt.errors import SelectionRequiredError, SkillOptError
from skillopt_sleep import rundir
from skillopt_sleep.adopt import (
    AdoptResult,
    Recovery,
    adopt,
    adopted_names,
    recover_interrupted,
    subset_dirs,
)
from skillopt_sleep.commands._common import say
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.rundir import RunDir
from skillopt_sleep.staging import load_manifest
from skillopt_sleep.state import runs_dir

__all__ = [
    "adopt_pending",
    "find_run",
    "kept_edits",
    "latest_with_proposal",
    "pending",
    "project_runs",
    "recover_adoptions",
    "run_summary",
    "say_recovered",
    "settle_dead_runs",
]


def project_runs(cfg: SleepConfig, project: Path) -> list[Path]:
    """The project's run directories, oldest first."""
    return RunDir.list_runs(runs_dir(cfg.state_path(), project))


def run_summary(path: Path) -> dict[str, Any]:
    try:
        journal = RunDir.open(path).journal
    except SkillOptError as exc:
        return {"run_id": path.name, "status": "unreadable", "reason": str(exc)}
    return {
        "run_id": journal.run_id or path.name,
        "night": journal.night,
        "status": journal.status.value,
        "outcome": journal.outcome,
        "reason": journal.reason,
        "started_at": journal.started_at or None,
        "ended_at": journal.ended_at,
        "dry_run": journal.dry_run,
        "run_dir": str(path),
        "set_aside": _set_aside(path),
    }


def _set_aside(path: Path) -> list[str]:
    """The tasks a night set aside (their calls kept failing), from its report."""
    rows = read_json_object(path / rundir.REPORT_JSON).get("set_aside")
    if not isinstance(rows, list):
        return []
    return [str(r.get("task")) for r in rows if isinstance(r, dict)]


def settle_dead_runs(summaries: list[dict[str, Any]], *, lock_held: bool) -> None:
    """Show a run still marked ``running`` whose process is gone as ``interrupted``.

    Call it after reading ``summaries`` and then checking the project lock: a night holds
    the lock while its run says ``running``, so with the lock free such a run was killed
    (SIGKILL, power loss), unless it finished meanwhile, which a second read tells.
    """
    if lock_held:
        return
    for summary in summaries:
        if summary.get("status") != "running":
            continue
        if run_summary(Path(str(summary["run_dir"]))).get("status") == "running":
            summary["status"] = "interrupted"
            summary["reason"] = "its process is gone; the next night resumes it"


def pending(path: Path) -> list[dict[str, Any]]:
    """Proposal entries of a run that are published and not adopted yet."""
    if not (path / "proposal" / "manifest.json").is_file():
        return []
    try:
        manifest = load_manifest(path)
        done = adopted_names(path)
    except SkillOptError:
        return []
    return [
        {
            "name": e.name,
            "kind": e.kind.value,
            "live_path": e.live_path,
            "run_dir": str(path),
            "fanout": e.fanout,
        }
        for e in manifest.entries
        if e.name not in done
    ]


def kept_edits(path: Path) -> list[dict[str, Any]]:
    """The night's kept edits of the managed skill and memory, with the ids ``adopt
    --edit`` takes, while that proposal is pending (``[]`` otherwise)."""
    from skillopt_sleep.edit_ids import edit_id

    if not any(not e["fanout"] for e in pending(path)):
        return []
    try:
        report = json.loads((path / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    edits = report.get("accepted_edits") if isinstance(report, dict) else None
    return [
        {"id": str(e.get("id") or edit_id(e)), "target": e.get("target", ""),
         "op": e.get("op", ""), "content": e.get("content", ""), "run_dir": str(path)}
        for e in edits or [] if isinstance(e, dict)
    ]  # fmt: skip


def latest_with_proposal(cfg: SleepConfig, project: Path) -> Path | None:
    for path in reversed(project_runs(cfg, project)):
        if pending(path):
            return path
    return None


def recover_adoptions(cfg: SleepConfig, project: Path) -> list[Recovery]:
    """Finish the adoptions of this project's nights that a killed process left half-done
    (completed or rolled back), so no command reads or reports a half-adopted state."""
    from skillopt_sleep.versions import restore_dirs

    runs = project_runs(cfg, project)
    subsets = [folder for run in runs for folder in subset_dirs(run)]
    return recover_interrupted([*runs, *subsets, *restore_dirs(cfg, project)])


def say_recovered(recoveries: list[Recovery]) -> None:
    for recovery in recoveries:
        say(f"note: {recovery.describe()}")


def find_run(runs: list[Path], wanted: str | None, *, any_path: bool = True) -> Path | None:
    """The run ``wanted`` names among ``runs``: a run directory name, a night number, or
    (with ``any_path``, for the CLI) a path to a run directory. ``None`` = the latest."""
    if not wanted:
        return runs[-1] if runs else None
    as_path = Path(wanted).expanduser()
    if any_path and as_path.is_dir() and (as_path / "run.json").is_file():
        return as_path.resolve()
    for run in reversed(runs):
        if run.name == wanted:
            return run
    if wanted.isdigit():
        for run in reversed(runs):
            try:
                night = RunDir.open(run).journal.night
            except SkillOptError:
                continue
            if str(night) == wanted:
                return run
    return None


def adopt_pending(
    cfg: SleepConfig,
    project: Path,
    run_dir: Path | None,
    only: list[str] | None,
    *,
    every: bool = False,
) -> AdoptResult | None:
    """What ``adopt`` does for the CLI and the MCP server alike (after
    :func:`recover_adoptions`): pick the run (default: the latest with a pending proposal)
    and adopt within the configured roots. ``None`` when no proposal is waiting.

    ``only`` names the proposals to adopt, ``every`` takes all pending ones; with neither,
    a night with per-skill proposals raises :class:`SelectionRequiredError` (listing them)
    unless ``bare_adopt = "all"``."""
    run_dir = run_dir or latest_with_proposal(cfg, project)
    if run_dir is None:
        return None
    if not every and not only:
        waiting = pending(run_dir)
        if any(e["fanout"] for e in waiting) and cfg.bare_adopt != "all":
            names = tuple(str(e["name"]) for e in waiting)
            raise SelectionRequiredError(
                f"this night proposes {len(names)} documents ({', '.join(names)}); adopt the "
                "ones you want with --skill NAME (repeatable), or all of them with --all",
                names=names,
            )
    roots = [str(r) for r in cfg.adopt_roots(project)]
    return adopt(run_dir, skill_roots=roots, select=None if every else only)
