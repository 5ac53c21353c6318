"""Which run directories a project keeps: the last N nights, every adopted night, and
whatever a pending proposal, the skill store, an adoption or a resume still needs.

A run directory holds a night's tasks, rollouts, evidence and report (0.4-3 MB with
tasks), so without a policy they grow for ever. After each night :func:`apply_retention`
deletes the runs :func:`plan_retention` does not keep. A run is kept, whatever its age,
when it is:

- tonight's run;
- an adoption in progress (its adoption journal or lock is there) or adopted (receipts),
  when ``keep_adopted``: its backups are the way back to the files it replaced;
- resumable (running, or stopped and marked resumable): the next night resumes it;
- the newest run with a proposal not yet adopted (what ``adopt`` picks), and the newest one
  whose pins still hold (what ``adopt`` can still write);
- the provenance of a skill's latest version in the skill store;
- unreadable (a run we cannot read is never deleted on a guess).

Earlier complete no-task nights are deleted whatever N is (they hold only harvest
diagnostics; a quiet project would otherwise gain one directory a night); the newest one
is kept. Everything else is kept while it is among the last ``keep_last`` runs.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from skillopt.errors import LockHeldError, SkillOptError
from skillopt.logging import get_logger
from skillopt_sleep.adopt import adopted_names, pending
from skillopt_sleep.adopt_journal import JOURNAL_NAME, RunLock
from skillopt_sleep.night_end import NightResult, RunStatus
from skillopt_sleep.rundir import RunDir
from skillopt_sleep.staging import ManifestEntry, sha256_file

__all__ = [
    "Retention",
    "RunFacts",
    "apply_retention",
    "plan_retention",
    "read_facts",
    "store_runs",
]

_log = get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFacts:
    """What retention needs to know about one run directory."""

    path: Path
    readable: bool = True
    status: str = ""
    outcome: str = ""
    resumable: bool = False
    adopting: bool = False  # an adoption journal is there (interrupted or running)
    adopted: bool = False
    pending: bool = False  # a published proposal with an entry not adopted yet
    adoptable: bool = False  # ... whose live pins still hold

    @property
    def run_id(self) -> str:
        return self.path.name


def read_facts(path: Path) -> RunFacts:
    try:
        journal = RunDir.open(path).journal
    except SkillOptError:
        return RunFacts(path=path, readable=False)
    waiting = _pending(path)
    return RunFacts(
        path=path,
        status=journal.status.value,
        outcome=journal.outcome or "",
        resumable=bool(journal.resumable),
        adopting=(path / JOURNAL_NAME).exists(),
        adopted=bool(_adopted(path)),
        pending=bool(waiting),
        adoptable=any(sha256_file(e.live_path) == e.live_sha256 for e in waiting),
    )


def _pending(path: Path) -> list[ManifestEntry]:
    if not (path / "proposal" / "manifest.json").is_file():
        return []
    try:
        return list(pending(path))
    except SkillOptError:
        return []


def _adopted(path: Path) -> set[str]:
    try:
        return adopted_names(path)
    except SkillOptError:
        return {"?"}  # receipts we cannot read: treat the night as adopted (kept)


def store_runs(project_dir: Path) -> set[str]:
    """Run ids that produced a skill's latest version in the project's skill store."""
    found: set[str] = set()
    for index in (project_dir / "skills").glob("*/index.json"):
        try:
            versions = json.loads(index.read_text(encoding="utf-8")).get("versions") or []
        except (OSError, ValueError, AttributeError):
            continue
        if versions and isinstance(versions[-1], dict):
            found.add(str(versions[-1].get("run_id", "")))
    return found


@dataclass(frozen=True, slots=True)
class Retention:
    keep: dict[Path, str]  # path -> why it is kept
    delete: list[Path]


def plan_retention(
    runs: Sequence[RunFacts],
    *,
    keep_last: int,
    keep_adopted: bool,
    current: Path | None,
    store_run_ids: set[str],
) -> Retention:
    """Decide, oldest to newest, which runs stay (pure: no file is touched)."""
    keep: dict[Path, str] = {}
    newest_pending = next((r.path for r in reversed(runs) if r.pending), None)
    newest_adoptable = next((r.path for r in reversed(runs) if r.adoptable), None)
    no_tasks = [
        r.path for r in runs if r.status == RunStatus.COMPLETE and r.outcome == NightResult.NO_TASKS
    ]
    for run in runs:
        why = _protected(run, keep_adopted=keep_adopted, current=current,
                         store_run_ids=store_run_ids)  # fmt: skip
        if not why and run.path in (newest_pending, newest_adoptable):
            why = "its proposal is waiting to be adopted"
        if why:
            keep[run.path] = why
    counted = [r.path for r in runs if r.path not in no_tasks[:-1]]
    recent = counted if keep_last <= 0 else counted[-keep_last:]
    for path in recent:
        keep.setdefault(path, f"one of the last {keep_last} nights" if keep_last else "kept")
    return Retention(keep=keep, delete=[r.path for r in runs if r.path not in keep])


def _protected(
    run: RunFacts, *, keep_adopted: bool, current: Path | None, store_run_ids: set[str]
) -> str:
    if run.path == current:
        return "tonight's run"
    if not run.readable:
        return "unreadable (never deleted on a guess)"
    if run.adopting:
        return "an adoption of it is in progress or was interrupted"
    if run.status == RunStatus.RUNNING or (
        run.resumable and run.status in (RunStatus.ABORTED, RunStatus.FAILED, RunStatus.WAITING)
    ):
        return "the next night resumes it"
    if run.run_id in store_run_ids:
        return "it produced a skill's latest stored version"
    if keep_adopted and run.adopted:
        return "its proposal was adopted"
    return ""


def apply_retention(
    runs_root: Path,
    project_dir: Path,
    *,
    keep_last: int,
    keep_adopted: bool,
    current: Path | None,
) -> list[Path]:
    """Delete the run directories the policy does not keep; returns the deleted ones.

    Each is deleted under its adoption lock, so a run an ``adopt`` is working on right now
    is left alone; a directory that cannot be removed is logged and kept.
    """
    runs = [read_facts(p) for p in RunDir.list_runs(runs_root)]
    plan = plan_retention(
        runs,
        keep_last=keep_last,
        keep_adopted=keep_adopted,
        current=current,
        store_run_ids=store_runs(project_dir),
    )
    deleted: list[Path] = []
    for path in plan.delete:
        try:
            with RunLock(path):
                if (path / JOURNAL_NAME).exists():
                    continue  # an adoption started since the plan was made
                shutil.rmtree(path)
        except LockHeldError:
            continue
        except OSError as exc:
            _log.warning("retention.delete_failed", run_dir=str(path), error=str(exc))
            continue
        deleted.append(path)
    if deleted:
        _log.info(
            "retention.deleted",
            runs=len(deleted),
            kept=len(plan.keep),
            keep_last=keep_last,
            oldest_kept=min((p.name for p in plan.keep), default=""),
        )
    return deleted
