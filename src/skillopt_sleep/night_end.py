"""How a night ended, in two words: where its run stands (:class:`RunStatus`) and what it
produced (:class:`NightResult`).

Every record of a night speaks in these two: the run journal (``run.json``: ``status``),
the report (``report.json``: ``status`` and ``result``), what ``once`` returns
(:class:`~skillopt_sleep.night.outcome.NightOutcome`), the project's history
(:class:`~skillopt_sleep.state.NightEntry`: ``complete``, or ``no_tasks`` for a night that
had nothing to learn from) and the daemon's summary of one wake (a run status, or
``locked``/``skipped`` when no night ran). No imports: the daemon reads it without the night.

A part of a night that learns in a run directory of its own (a project skill's learning, the
step for the rules the skills share) says how it stands in a third word, :class:`PartStatus`.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["NightResult", "PartStatus", "RunStatus"]


class RunStatus(StrEnum):
    """Where the run stands: still running, or how it stopped."""

    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    ABORTED = "aborted"  # interrupted (Ctrl-C, SIGTERM, a bug): the next night resumes it
    WAITING = "waiting"  # handoff mode: prompts wait for answers; the same command resumes it


class NightResult(StrEnum):
    """What a finished night produced."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    NO_TASKS = "no_tasks"
    NO_EDITS = "no_edits"
    BUDGET_REACHED = "budget_reached"
    FAILED = "failed"
    WAITING = "waiting_for_answers"  # handoff mode: see RunStatus.WAITING


class PartStatus(StrEnum):
    """How one part of a night stands: a project skill's learning (the report's ``skills``
    rows, :mod:`skillopt_sleep.night.skills.fanout`) or the step for the rules the skills
    share (``shared_memory``, :mod:`skillopt_sleep.night.skills.shared`).

    Neither a :class:`RunStatus` (a part has a result, not only a run state) nor a
    :class:`NightResult`: a part may not have run yet (``pending``), be left out (``skipped``)
    or not be needed tonight (``not_needed``), a part never has ``no_tasks``, and its waiting
    is written ``waiting`` (the night's is ``waiting_for_answers``)."""

    PENDING = "pending"  # a skill that learns tonight, not yet run
    SKIPPED = "skipped"  # a skill with too few tasks, or one a proposal could not be adopted for
    NOT_NEEDED = "not_needed"  # the shared step: tonight had nothing several skills could share
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    NO_EDITS = "no_edits"
    FAILED = "failed"
    BUDGET_REACHED = "budget_reached"
    WAITING = "waiting"  # handoff mode: it resumes with the night
