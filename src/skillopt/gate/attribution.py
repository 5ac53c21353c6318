"""Leave-one-out attribution: which edits of a failing bundle spoil it.

A bundle of edits (the night's union of accepted singles, the trainer's step candidate)
can fail although most of its edits help: one harmful edit spoils the rest. Each edit is
tested by comparing the whole bundle with the bundle without it; an edit whose removal
makes the documents significantly better is dropped. With one test per edit the
confidence of each is Bonferroni-corrected (:func:`bonferroni`), so noise alone rarely
drops a good edit.

The caller says how a bundle without an edit is built and how two documents are compared
(``compare(whole, without, config)``: its own sampling, the decision
:func:`skillopt.gate.decide.decide_paired` at ``config``'s corrected confidence).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from skillopt.concurrency import gather_indexed
from skillopt.gate.config import GateConfig
from skillopt.types import GateDecision

__all__ = ["Attribution", "Build", "Compare", "bonferroni", "leave_one_out"]

D = TypeVar("D")
E = TypeVar("E")

Build = Callable[[Sequence[E]], Awaitable[D | None]]
"""The documents from a subset of the edits (None: they cannot be built, or are the whole)."""

Compare = Callable[[D, D, GateConfig], Awaitable[GateDecision]]
"""``compare(whole, without, config)``: is ``without`` significantly better than ``whole``?"""


def bonferroni(confidence: float, tests: int) -> float:
    """The confidence of each of ``tests`` tests that together keep ``confidence``."""
    alpha = (1.0 - confidence) / max(1, tests)
    return 1.0 - alpha


@dataclass(frozen=True, slots=True, kw_only=True)
class Attribution(Generic[E]):
    """Per edit, the decision on the bundle without it (None: not tested)."""

    edits: tuple[E, ...]
    decisions: tuple[GateDecision | None, ...]

    @property
    def dropped(self) -> tuple[int, ...]:
        """The indices of the edits whose removal made the documents significantly better."""
        return tuple(i for i, d in enumerate(self.decisions) if d is not None and d.accepted)

    @property
    def kept(self) -> list[E]:
        drop = set(self.dropped)
        return [e for i, e in enumerate(self.edits) if i not in drop]


async def leave_one_out(
    whole: D,
    edits: Sequence[E],
    *,
    build: Build[E, D],
    compare: Compare[D],
    config: GateConfig,
) -> Attribution[E]:
    """Every edit left out once, all at once; each bundle without one edit compared with
    ``whole`` at the Bonferroni-corrected confidence."""
    corrected = config.model_copy(update={"confidence": bonferroni(config.confidence, len(edits))})

    async def one(i: int) -> GateDecision | None:
        without = await build([e for j, e in enumerate(edits) if j != i])
        if without is None:
            return None
        return await compare(whole, without, corrected)

    decisions = await gather_indexed(one, len(edits))
    return Attribution(edits=tuple(edits), decisions=tuple(decisions))
