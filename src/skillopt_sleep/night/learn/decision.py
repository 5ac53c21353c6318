"""What a night's learning decided (:class:`Decision`): the documents it proposes, the edits
it kept and rejected, and the gate decision of its final check."""

from __future__ import annotations

from dataclasses import dataclass, field

from skillopt.types import EditRecord, GateAction, GateDecision
from skillopt_sleep.night.learn.candidate import Candidate
from skillopt_sleep.replay import Docs

__all__ = ["Decision"]


@dataclass(kw_only=True)
class Decision:
    """The outcome of :func:`skillopt_sleep.night.learn.rounds.consolidate` (and of a
    gate-off night)."""

    accepted: bool
    action: GateAction
    baseline: float
    candidate: float
    final: GateDecision | None
    docs: Docs
    applied: list[EditRecord]
    rejected: list[EditRecord]
    untested: list[Candidate] = field(default_factory=list)
    folds: dict[str, int] = field(default_factory=dict)  # task id -> fold (first round)
    nothing_to_learn: bool = False
    start_scores: dict[str, float] = field(default_factory=dict)  # per task, live documents
    # the budget ran out mid-rounds: what it cut short (the kept edits went to the final check)
    budget_stop: str = ""
    restore: bool = (
        False  # ``docs`` are a replaced version, staged whole (:mod:`skillopt_sleep.night.restore`)
    )
