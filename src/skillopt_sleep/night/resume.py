"""Resume rules: which earlier run a new night picks up, and what it asks again.

A night killed mid-way (or failed on an outage) is resumed by the next ``once`` with the
same tasks, instead of starting afresh:

1. :func:`find_resumable` looks at the project's last run. One still marked ``running``
   is dead (the caller holds the project lock); one ``aborted`` or ``failed`` is resumed
   when it said it was ``resumable``.
2. It is aborted for good instead when it failed :data:`MAX_FAILED_RESUMES` times, the
   next night is of another kind (dry run vs real), the configuration changed, or it never
   saved its tasks (unless it waits for the answers to its mining prompts, in handoff mode:
   one night is one run across its sittings, the resumed one gathering again with them).
3. A failed run forgets the reflections none of whose calls answered
   (:func:`forget_failed_reflections`): they were an outage, not a reply.

What a resumed night then reuses lives with the stage that made it: the gathered tasks
(``tasks.jsonl``, :mod:`.stages`), every judged rollout (``rollouts.jsonl``, preloaded
into the replayer) and every reflection (checkpointed in ``run.json``,
:meth:`.night_state.Night.reflect`). Nothing is asked of a model twice.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from skillopt.errors import SkillOptError
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.rundir import RunDir, RunStatus

__all__ = ["MAX_FAILED_RESUMES", "find_resumable", "forget_failed_reflections"]

MAX_FAILED_RESUMES = 3


def find_resumable(
    root: Path, cfg: SleepConfig, *, dry_run: bool, now: datetime
) -> tuple[RunDir | None, list[str]]:
    """The last run if it was killed mid-night and can be resumed; abort it otherwise.

    The caller holds the project lock, so a run still marked ``running`` is dead.
    """
    notes: list[str] = []
    runs = RunDir.list_runs(root)
    if not runs:
        return None, notes
    try:
        last = RunDir.open(runs[-1])
    except SkillOptError as exc:
        notes.append(f"ignored an unreadable earlier run: {exc}")
        return None, notes
    stopped = last.status in (RunStatus.ABORTED, RunStatus.FAILED, RunStatus.WAITING)
    interrupted = stopped and last.journal.resumable
    if last.status is not RunStatus.RUNNING and not interrupted:
        return None, notes
    reason = ""
    if last.status is RunStatus.FAILED and len(last.journal.resumed) >= MAX_FAILED_RESUMES:
        reason = f"failed again after {MAX_FAILED_RESUMES} resumes; a new night starts"
    elif last.journal.dry_run != dry_run:
        reason = "interrupted; the next night was a different kind (dry run vs real)"
    elif last.journal.config_hash != cfg.fingerprint():
        reason = "interrupted; the configuration changed before it could be resumed"
    elif not last.stage_done("harvest") and last.status is not RunStatus.WAITING:
        reason = "interrupted before its tasks were saved; a new night starts from scratch"
    if reason:
        last.update(resumable=False)
        last.finish(RunStatus.ABORTED, now, outcome="aborted", reason=reason)
        notes.append(f"earlier run {last.run_id} marked aborted: {reason}")
        return None, notes
    if last.status is RunStatus.FAILED:
        asked_again = forget_failed_reflections(last)
        notes.append(
            f"run {last.run_id} failed ({last.journal.reason or 'an outage'}); "
            "resuming it keeps every call that answered"
            + (f", and asks {asked_again} failed reflection(s) again" if asked_again else "")
        )
    return last, notes


def forget_failed_reflections(run: RunDir) -> int:
    """Reflections none of whose calls answered are asked again on resume: they were an
    outage, not a reply (checkpoints of answered reflections are kept)."""
    checkpoint = run.journal.checkpoint
    failed = [
        key
        for key, saved in checkpoint.items()
        if key.startswith("reflect.")
        and isinstance(saved, dict)
        and saved.get("errors")
        and not saved.get("edits")
        and not saved.get("raw")
    ]
    run.update(checkpoint={k: v for k, v in checkpoint.items() if k not in failed})
    return len(failed)
