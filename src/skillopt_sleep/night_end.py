"""How a night ended, in two words: where its run stands (:class:`RunStatus`) and what it
produced (:class:`NightResult`).

Every record of a night speaks in these two: the run journal (``run.json``: ``status``),
the report (``report.json``: ``status`` and ``result``), what ``once`` returns
(:class:`~skillopt_sleep.night.outcome.NightOutcome`), the project's history
(:class:`~skillopt_sleep.state.NightEntry`: ``complete``, or ``no_tasks`` for a night that
had nothing to learn from) and the daemon's summary of one wake (a run status, or
``locked``/``skipped`` when no night ran). No imports: the daemon reads it without the night.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["NightResult", "RunStatus"]


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
