"""Spending a tight budget where the value is: the singles a step can afford, best first.

When the up-front estimate says the call budget will cut the night short
(:attr:`.measure.Noise.tight_budget`), a step's singles
(:func:`.crossfit.learn_step`) are not all started at once, to run out together with
nothing decided. Instead:

1. **Order** (:func:`by_value`): the candidates that can lift the most first: an edit
   several folds proposed (held out on more tasks), then one motivated by more failing
   tasks; an edit a single already measured tonight without keeping it goes last.
2. **Afford** (:class:`SinglesBudget`): they run one after another, and each starts only
   when the calls left cover it, the union that may follow with its attribution, and the
   final check (both arms, unless already held back): measured at what tonight's singles
   cost per held-out task so far.
   A candidate the budget cannot cover is *untested* tonight, not rejected: carried to a
   later night like any edit nothing could exercise.

What is kept still passed every check an uncapped night makes; only fewer things are tried.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skillopt_sleep.night.learn.candidate import Candidate
    from skillopt_sleep.night.learn.measure import Budget
    from skillopt_sleep.night.learn.trials import Trial

__all__ = ["FIRST_GUESS", "NOT_TRIED", "SinglesBudget", "by_value", "calls_left"]

NOT_TRIED = "not tried tonight: the budget left covers no more (carried)"
FIRST_GUESS = 1.5  # calls per held-out task sample before a single was measured tonight


def calls_left(spend: Budget) -> float | None:
    """The calls the budget still allows (the token cap read at tonight's tokens per call);
    None without a cap."""
    left: list[float] = []
    if spend.max_calls:
        left.append(spend.max_calls - spend.calls)
    if spend.max_tokens and spend.calls and spend.tokens:
        left.append((spend.max_tokens - spend.tokens) / (spend.tokens / spend.calls))
    return min(left) if left else None


def by_value(
    candidates: Sequence[Candidate], failing: Callable[[Candidate], int], *, tried: Sequence[Trial]
) -> list[Candidate]:
    """The candidates, those that can lift the most first; an edit whose text a single
    already measured tonight (for the other document) and did not keep goes last
    (``tried``: tonight's trials so far)."""
    measured = {
        e.content for t in tried if t.kind == "single" and t.decision is not None
        and not t.decision.accepted for e in t.edits
    }  # fmt: skip
    return sorted(
        candidates, key=lambda c: (c.edit.content in measured, -len(c.held_out), -failing(c))
    )


class SinglesBudget:
    """Whether the next single fits the calls left in ``budget``, with what must follow it
    (``samples``: the gate's samples per task, a single's first guess)."""

    def __init__(self, budget: Budget, *, samples: int, n_tasks: int) -> None:
        self.budget = budget
        self.samples = samples
        self.n_tasks = n_tasks
        self.tried = 0  # held-out tasks of the singles run so far
        self.spent = 0  # their calls
        self.skipped = 0

    @property
    def per_task(self) -> float:
        return self.spent / self.tried if self.tried else FIRST_GUESS * self.samples

    def affords(self, held_out: int) -> bool:
        left = calls_left(self.budget)
        if left is None:
            return True
        per = self.per_task
        # two singles may pass: a union, and its attribution when it lost a single's gain
        # (the union's arm and one without an edit, on samples of their own)
        union = 3 * self.n_tasks * per if self.tried else 0.0
        # the final check draws both of its arms anew
        final = 0.0 if self.budget.holding else 2 * self.n_tasks * per
        if held_out * per + union + final > left:
            self.skipped += 1
            return False
        return True

    def ran(self, held_out: int, calls: int) -> None:
        self.tried += held_out
        self.spent += calls
