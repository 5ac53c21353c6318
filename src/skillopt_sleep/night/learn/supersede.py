"""Newer evidence supersedes older: archived tasks the user's latest sessions contradict.

Two tasks *contradict* when one learned line cannot serve both: the night's gate measured
an edit that changes that line (a ``replace`` or a ``delete``) turn some tasks from worse
to better and others from better to worse, on the same documents, paired per sample. The
test is the gate's own measurement, whatever the judges are (rubric, rule checks, exact
answers), never a match of words. Recency then decides, and only recency:

1. **Candidates.** Every trial the gate rejected *because of a regression*
   (``blocked_by_regression``) whose applied edits replace or delete a line: an ``add``
   never supersedes anything (a harmful generalisation is an ``add`` that breaks tasks).
2. **Newer and older.** Its regressed tasks are the older evidence; the newer evidence is
   its improved tasks seen since every regressed one was last seen, in a session and on a
   night later than theirs (an older task that improves too agrees with the change and is
   no evidence either way). Without such newer tasks the trial supersedes nothing. Every
   regressed task is older than them by construction: one regressed task as recent as
   the evidence against it is a real conflict, and it leaves no newer evidence.
3. **Mark.** The regressed tasks are superseded in the archive by the improved ones, with
   the line they pull apart, the date and why (:meth:`TaskArchive.mark_superseded`); they
   are never recalled again, so the next night gates the same edit without them.

A history harvested in one night has every task mined on the same night, so this never
fires there: only sessions that arrived after the older tasks were mined can supersede.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from skillopt.skilldoc import normalise
from skillopt.types import DeltaStatus, EditOp
from skillopt_sleep.night.learn.trials import Trial
from skillopt_sleep.tasks.records import ArchivedTask, Supersession

__all__ = ["find_supersessions", "stale_lines"]

_CHANGES_A_LINE = frozenset({EditOp.REPLACE.value, EditOp.DELETE.value})


def stale_lines(trial: Trial, learned: Sequence[str] = ()) -> list[str]:
    """The lines the trial's applied edits replace or delete: the learned bullet the
    anchor matches when ``learned`` holds one, else the anchor as proposed."""
    out: list[str] = []
    for edit in trial.applied:
        if edit.op.strip().lower() not in _CHANGES_A_LINE:
            continue
        needle = (edit.anchor or edit.content).strip()
        if not needle:
            continue
        key = normalise(needle)
        line = next((b for b in learned if key in normalise(b)), needle)
        out.append(line)
    return list(dict.fromkeys(out))


def find_supersessions(
    trials: Iterable[Trial],
    archived: Mapping[str, ArchivedTask],
    *,
    night: int,
    now: datetime,
    learned: Sequence[str] = (),
    superseded: Iterable[str] = (),
) -> list[Supersession]:
    """The archived tasks tonight's trials show to be contradicted by newer ones (see the
    module docstring); one mark per task (its first trial wins)."""
    done = set(superseded)
    marks: dict[str, Supersession] = {}
    for trial in trials:
        decision = trial.decision
        if decision is None or decision.accepted or not decision.blocked_by_regression:
            continue
        lines = stale_lines(trial, learned)
        if not lines:
            continue
        improved = [archived[d.task_id] for d in decision.task_deltas
                    if d.status is DeltaStatus.IMPROVED and d.task_id in archived]  # fmt: skip
        regressed = [archived[d.task_id] for d in decision.task_deltas
                     if d.status is DeltaStatus.REGRESSED and d.task_id in archived]  # fmt: skip
        if not improved or not regressed:
            continue
        last_seen = max(t.last_seen for t in regressed)
        last_night = max(t.last_night for t in regressed)
        newer = [t for t in improved if t.last_seen > last_seen and t.last_night > last_night]
        if not newer:
            continue
        since = min(t.last_seen for t in newer)
        about = "; ".join(lines)
        by = tuple(sorted(t.id for t in newer))
        for task in regressed:
            if task.id in done or task.id in marks:
                continue
            marks[task.id] = Supersession(
                task_id=task.id,
                night=night,
                marked_at=now,
                since=since,
                by_tasks=by,
                about=about,
                why=(
                    f"last asked {task.last_seen:%Y-%m-%d}; {len(by)} task(s) from sessions "
                    f"since {since:%Y-%m-%d} pass only when this line changes, and this one "
                    f"then fails (trial {trial.name})"
                ),
            )
    return list(marks.values())
