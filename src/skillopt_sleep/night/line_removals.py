"""Adopted lines the user's sessions contradict, proposed for removal through the gate.

:mod:`skillopt_sleep.line_watch` flags an adopted learned line when the user corrected the agent
on its requests after its adoption. The next night turns each flagged line into an edit:

1. **Which lines.** The flagged lines of the managed skill and memory, of the documents
   the night may change (``night.evolve_skill`` / ``night.evolve_memory``).
2. **The edit.** A ``delete`` of that line from its learned block, joining the night's
   candidates as an edit carried from an earlier night does (:func:`removal_candidates`):
   tested alone on every task (it writes no text, so no task's failures shaped it and
   every task is held out), then in the union and the final check like any other edit.
   It is staged only when the gate accepts it; one no task could exercise stays untested
   (never rejected for it), and the line is flagged again the next night.
3. **What became of it** (:func:`watched_report`): per flagged line, ``removed`` (staged
   for adoption), ``kept`` (the gate rejected the removal) or ``untested``, with why.

Nothing here calls a model, and a night with no flagged line gets no candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skillopt.types import EditOp, EditRecord, EditTarget
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.line_watch import WatchedLine, watch_lines
from skillopt_sleep.night.course import Course
from skillopt_sleep.night.learn.candidate import Candidate
from skillopt_sleep.night.learn.trials import Trial, Verdict
from skillopt_sleep.night.night_state import Night

__all__ = ["removal_candidates", "removal_edit", "watched_report"]

WHY_REMOVED = "your sessions corrected the agent against this line after its adoption"


def removal_edit(line: WatchedLine) -> EditRecord:
    """The ``delete`` of ``line`` from its document's learned block."""
    return EditRecord(
        target=EditTarget(line.target), op=EditOp.DELETE.value, anchor=line.line,
        rationale=WHY_REMOVED,
    )  # fmt: skip


def _why(line: WatchedLine) -> str:
    return (
        f"watched line {line.edit_id} (adopted on night {line.night}) was contradicted by "
        f"your sessions since: after: {line.after.describe()}; before: "
        f"{line.before.describe()}: its removal is tested like any edit"
    )


def _evolved(cfg: SleepConfig) -> set[str]:
    return {t for t, on in (("skill", cfg.night.evolve_skill),
                            ("memory", cfg.night.evolve_memory)) if on}  # fmt: skip


def _watched_lines(night: Night) -> list[WatchedLine]:
    """The project's watched lines, read from the run directories once a night (no
    adoption happens while a night runs): its candidates and its report share them."""
    if night.watched is None:
        night.watched = watch_lines(night.cfg, night.project)
    return night.watched


def removal_candidates(night: Night) -> list[Candidate]:
    """A candidate removal of every flagged adopted line the night may change (none when
    no line is flagged: reading the run directories costs no model call). A line whose
    removal a night already rejected is not tried again until a new correction comes."""
    evolved = _evolved(night.cfg)
    return [
        Candidate(edit=removal_edit(w), fold=-1, seen=frozenset(), held_out=(), why=_why(w))
        for w in _watched_lines(night)
        if w.contradicted and w.target in evolved and not w.settled
    ]


def _same(a: EditRecord, b: EditRecord) -> bool:
    return (a.target, a.op, a.anchor.strip()) == (b.target, b.op, b.anchor.strip())


def _trial_of(edit: EditRecord, trials: Sequence[Trial]) -> Trial | None:
    return next(
        (t for t in trials if t.kind == "single" and any(_same(e, edit) for e in t.edits)), None
    )


def _tonight(line: WatchedLine, trials: Sequence[Trial], course: Course) -> dict[str, str]:
    """What the night did with the removal of a flagged line."""
    edit, decision = removal_edit(line), course.decision
    if decision is not None and course.accepted and any(_same(e, edit) for e in decision.applied):
        return {"removal": "removed", "why": "the gate accepted its removal: staged for adoption"}
    trial = _trial_of(edit, trials)
    if trial is None or trial.decision is None:
        reason = trial.note if trial is not None and trial.note != _why(line) else ""
        return {
            "removal": "untested",
            "why": reason
            or "no gate trial ran tonight (nothing to learn, or a quiet night): "
            "the next night tests it again",
        }
    if trial.verdict is Verdict.UNTESTED:
        why = "no task tonight moved without it: the next night tests it again"
        return {"removal": "untested", "why": why}
    if trial.verdict is Verdict.REJECTED:
        return {"removal": "kept", "why": "the gate rejected its removal (your tasks did not "
                "do better without it)"}  # fmt: skip
    return {"removal": "kept", "why": "its removal passed alone but not in the night's "
            "union or final check"}  # fmt: skip


def watched_report(night: Night, course: Course) -> list[dict[str, Any]] | None:
    """The watched lines for the report; a flagged line says what the night did with its
    removal (``tonight``)."""
    evolved = _evolved(night.cfg)
    out = []
    for line in _watched_lines(night):
        row = line.to_dict()
        if line.contradicted and line.target in evolved and not line.settled:
            row["tonight"] = _tonight(line, night.trials, course)
        out.append(row)
    return out or None
