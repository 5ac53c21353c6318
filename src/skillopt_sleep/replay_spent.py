"""What one replayed sample cost the night (:class:`Spent`), and how a journal row records it.

Kept apart from :mod:`skillopt_sleep.replay`, which counts with it: a resumed night reads
these parts back from ``rollouts.jsonl`` (``spent``) to count an earlier run's calls once.
"""

from __future__ import annotations

from dataclasses import dataclass

from skillopt.backends.base import Completion

__all__ = ["Spent", "spent_pair", "spent_parts"]


@dataclass
class Spent:
    """Model calls one sample made (a reply the response cache served is none), and their
    tokens."""

    attempt: int = 0
    judge: int = 0
    tokens: int = 0
    cached_tokens: int = 0
    judge_tokens: int = 0  # part of ``tokens``
    earlier: tuple[int, int] = (0, 0)  # (calls, tokens) an earlier run spent on the attempt

    def count(self, done: Completion, *, judge: bool = False) -> None:
        if done.cached:
            return
        requests = max(1, done.attempts)  # an unusable reply the pool asked again included
        usage = done.spent or done.usage
        if judge:
            self.judge += requests
            self.judge_tokens += usage.total_tokens
        else:
            self.attempt += requests
        self.tokens += usage.total_tokens
        self.cached_tokens += usage.cached_tokens

    def parts(self) -> dict[str, list[int]]:
        """What the sample cost the night, as its row records it: the attempt's calls and
        tokens (an earlier run's, when it read the answer back) and the judge's."""
        attempt_tokens = self.tokens - self.judge_tokens
        return {
            "attempt": [self.attempt + self.earlier[0], attempt_tokens + self.earlier[1]],
            "judge": [self.judge, self.judge_tokens],
        }


def spent_pair(value: object) -> tuple[int, int]:
    """(calls, tokens) as a journal records them (``[calls, tokens]``); anything else (an
    older journal, a damaged value) counts as (0, 0)."""
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    ):
        return value[0], value[1]
    return 0, 0


def spent_parts(raw: object) -> tuple[tuple[int, int], tuple[int, int]]:
    """A row's ``spent`` as ((attempt calls, tokens), (judge calls, tokens))."""
    parts = raw if isinstance(raw, dict) else {}
    return spent_pair(parts.get("attempt")), spent_pair(parts.get("judge"))
