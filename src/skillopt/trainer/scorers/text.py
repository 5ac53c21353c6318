"""Text-match scorers: ``exact`` (the answer as written), ``em`` (normalised exact match,
F1 as the soft score) and ``f1`` (token F1, passing at a threshold), max over the golds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from skillopt.errors import DataError
from skillopt.trainer.envs.qa import exact_match, extract_answer, token_f1
from skillopt.trainer.scorers.base import ScoreContext, Verdict, passed

__all__ = ["ExactScorer", "F1Scorer", "golds_of", "score_em", "score_exact", "score_f1"]


def golds_of(item: Mapping[str, Any]) -> list[str]:
    """The item's gold answers: ``answers`` (a list) or ``answer`` (one value)."""
    raw = item.get("answers", item.get("answer"))
    golds = raw if isinstance(raw, list) else [] if raw is None else [raw]
    if not golds or not all(isinstance(g, str | int | float) for g in golds):
        raise DataError(f"item {item.get('id')!r}: needs 'answers' (a list) or 'answer'")
    return [str(g) for g in golds]


def score_exact(prediction: str, golds: Sequence[str]) -> Verdict:
    """Pass when the answer equals a gold as written (surrounding whitespace aside)."""
    hit = 1.0 if prediction.strip() in {g.strip() for g in golds} else 0.0
    return passed(
        hit,
        hit,
        failure=f"mismatch: predicted {prediction!r}, expected {list(golds)!r}",
        check=f"exact={hit:.0f} gold={list(golds)!r}",
    )


def score_em(prediction: str, golds: Sequence[str]) -> Verdict:
    """Normalised exact match (case, punctuation, articles), token F1 as the soft score."""
    hard, soft = exact_match(prediction, golds), token_f1(prediction, golds)
    return passed(
        hard,
        soft,
        failure=f"EM=0: predicted {prediction!r}, expected {list(golds)!r}",
        check=f"EM={hard:.0f} F1={soft:.2f} gold={list(golds)!r}",
    )


def score_f1(prediction: str, golds: Sequence[str], *, threshold: float) -> Verdict:
    """Token F1 as the soft score; a pass at ``threshold`` or above."""
    soft = token_f1(prediction, golds)
    hard = 1.0 if soft >= threshold else 0.0
    return passed(
        hard,
        soft,
        failure=f"F1={soft:.2f}<{threshold:g}: predicted {prediction!r}, expected {list(golds)!r}",
        check=f"F1={soft:.2f} (pass at {threshold:g}) gold={list(golds)!r}",
    )


@dataclass(frozen=True, slots=True)
class ExactScorer:
    normalise: bool  # False: "exact"; True: "em"

    @property
    def name(self) -> str:
        return "em" if self.normalise else "exact"

    async def score(self, reply: str, item: Mapping[str, Any], ctx: ScoreContext) -> Verdict:
        scorer = score_em if self.normalise else score_exact
        return scorer(extract_answer(reply), golds_of(item))


@dataclass(frozen=True, slots=True)
class F1Scorer:
    name: ClassVar[str] = "f1"
    threshold: float = 0.5

    async def score(self, reply: str, item: Mapping[str, Any], ctx: ScoreContext) -> Verdict:
        return score_f1(extract_answer(reply), golds_of(item), threshold=self.threshold)
