"""Fail a night whose model judge cannot be trusted, at the stage where judging failed.

A judge that keeps failing (unusable verdicts, empty or HTML replies, errors) would score
rubric answers 0 while rule-checked tasks still score, so a gate could accept edits
validated on the rule-checked tasks alone. Past ``limit`` (a share of the stage's judge
calls) the night fails instead, naming the stage and the commonest cause.
"""

from __future__ import annotations

from skillopt.errors import RunFailedError
from skillopt_sleep.verdicts import JudgeTally

__all__ = ["MIN_FAILURES", "check_judging"]

MIN_FAILURES = 3
"""In a small stage one unlucky failure is not a broken judge: below this many failures
the night fails only when every judge call of the stage failed."""


def check_judging(stage: str, tally: JudgeTally, *, limit: float) -> None:
    """Raise :class:`RunFailedError` when more than ``limit`` of the judge calls since the last
    check failed (see :data:`MIN_FAILURES`); the tally starts over either way."""
    taken = tally.take()
    if not taken.failed or taken.failed <= limit * taken.calls:
        return
    if taken.failed < MIN_FAILURES and taken.failed < taken.calls:
        return
    cause = taken.causes.most_common(1)[0][0]
    raise RunFailedError(
        stage,
        f"judging failed for {taken.failed} of {taken.calls} answers that needed the model "
        f"judge: {cause}",
    )
