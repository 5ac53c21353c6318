"""What a night takes from the task archive and gives back to it.

It takes the edits earlier nights could not test (:func:`carried_edits`) and, when the
models or their settings changed, brings back the tasks retired as solved under the old
ones (:func:`revive_for_models`). Once it has completed, it commits tonight's harvest,
every judged sample by the question it answered (:mod:`.quiet.recorded`), each task's outcome
under the live documents, the fate of every carried edit, the older tasks tonight's newer
evidence contradicts (:mod:`.learn.supersede`), and retires tasks solved or no longer asked for
(:func:`commit_archive`, idempotent, so a resumed night commits once).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from skillopt.types import EditRecord
from skillopt_sleep.night.gather_tasks import Gathered, commit_gathered
from skillopt_sleep.night.learn.candidate import Candidate
from skillopt_sleep.night.learn.decision import Decision
from skillopt_sleep.night.learn.supersede import find_supersessions
from skillopt_sleep.night.night_state import Night
from skillopt_sleep.night.quiet.questions import answer_key
from skillopt_sleep.night.quiet.recorded import keep_samples
from skillopt_sleep.night.skills.fanout import Fanout
from skillopt_sleep.tasks.archive import TaskArchive
from skillopt_sleep.tasks.records import ArchivePolicy, CarriedEditStatus

__all__ = ["MAX_CARRIED_NIGHTS", "carried_edits", "commit_archive", "revive_for_models"]

MAX_CARRIED_NIGHTS = 5


def revive_for_models(night: Night, archive: TaskArchive) -> None:
    """Tasks retired as solved under other models or settings come back to be measured
    under tonight's (said once, as a note)."""
    key = answer_key(night.cfg)
    if not key or night.dry_run:
        return
    revived = archive.revive_solved(key)
    if revived:
        note = (
            f"the models or their settings changed since the last night: {len(revived)} "
            "task(s) retired as solved come back to be measured under them"
        )
        night.notes.append(note)
        night.progress.note(note)


def carried_edits(archive: TaskArchive) -> tuple[list[Candidate], dict[EditRecord, int]]:
    """Edits earlier nights could not test, with what their reflections saw."""
    pending = archive.carried_edits()
    candidates = [
        Candidate(
            edit=c.edit,
            fold=-1,
            seen=c.seen_task_ids,
            held_out=(),
            carried_nights=c.nights_carried,
        )
        for c in pending
    ]
    return candidates, {c.edit: c.id for c in pending}


def commit_archive(
    night: Night,
    archive: TaskArchive,
    gathered: Gathered,
    decision: Decision | None,
    carried_ids: dict[EditRecord, int],
    *,
    night_no: int,
    now: datetime,
    docs_hash: str,
    learned: Sequence[str] = (),
    fanout: Fanout | None = None,
) -> dict[str, Any]:
    """Tonight's harvest, outcomes, carried edits and supersessions into the archive
    (idempotent); ``learned`` are the live documents' learned lines (named in a mark).
    The tasks routed to the project's own skills (``fanout``) record their samples and
    outcomes as the managed skill's do, under the documents they ran under."""
    commit_gathered(archive, gathered, night=night_no, now=now)
    rows = night.run.read_rollouts() + (fanout.rollout_rows() if fanout else [])
    keep_samples(night, archive, gathered.tasks, rows, night_no=night_no)
    if decision is None:
        return {}
    groups = [(docs_hash, decision.start_scores)]
    groups += [(docs.key, scores) for docs, scores in (fanout.outcome_groups() if fanout else [])]
    for hashed, scores in groups:
        archive.record_outcomes(
            night=night_no,
            run_id=night.run.run_id,
            docs_hash=hashed,
            scores={t: s for t, s in scores.items() if math.isfinite(s)},
            passed={t: s >= 1.0 for t, s in scores.items()},
            now=now,
            answer_key=answer_key(night.cfg),
        )
    settled = {c.edit: c for c in decision.untested}
    for edit, edit_id in carried_ids.items():
        if edit in decision.applied:
            archive.resolve_edit(edit_id, status=CarriedEditStatus.ACCEPTED, night=night_no,
                                 now=now, why="kept by the gate")  # fmt: skip
        elif edit in decision.rejected:
            archive.resolve_edit(edit_id, status=CarriedEditStatus.REJECTED, night=night_no,
                                 now=now, why="rejected by the gate")  # fmt: skip
    for cand in decision.untested:
        archive.carry_edits([cand.edit], seen_task_ids=cand.seen, night=night_no, now=now)
    for carried in archive.carried_edits():
        if carried.nights_carried > MAX_CARRIED_NIGHTS and carried.edit not in settled:
            archive.resolve_edit(
                carried.id, status=CarriedEditStatus.DROPPED, night=night_no, now=now,
                why=f"no night exercised it in {carried.nights_carried} nights",
            )  # fmt: skip
    marks = find_supersessions(
        night.trials, {t.id: t for t in archive.tasks()}, night=night_no, now=now,
        learned=learned, superseded=archive.superseded_ids(),
    )  # fmt: skip
    marked = set(archive.mark_superseded(marks))
    retired = archive.retire(now=now, policy=ArchivePolicy.from_settings(night.cfg.night))
    return {
        "retired": [{"task_id": t, "why": w} for t, w in retired],
        "superseded": [m.to_dict() for m in marks if m.task_id in marked],
    }
