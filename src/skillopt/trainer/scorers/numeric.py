"""``numeric``: the answer's number against the gold's, within a tolerance.

Numbers are read the way people write them: thousands separators (``1,234,567``, also with
thin or plain spaces between groups of three), a leading currency sign, a trailing unit or
percent sign (``12 kg``, ``12%`` both read as 12; units are not converted), a unicode minus,
scientific notation and simple fractions (``3/4``). The answer's *last* number counts (a
model that works its way to a result states it last). A pass is
``|predicted - gold| <= max(abs_tol, rel_tol * |gold|)``; the soft score falls off with the
relative error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from skillopt.trainer.envs.qa import extract_answer
from skillopt.trainer.scorers.base import ScoreContext, Verdict, passed
from skillopt.trainer.scorers.text import golds_of

__all__ = ["NumericScorer", "parse_number", "score_numeric"]

_GROUPED = r"\d{1,3}(?:[,\u202f\u00a0 ]\d{3})+(?![\d])"
_NUMBER = re.compile(
    rf"(?P<sign>[-+\u2212]?)\s*[$€£¥]?\s*"
    rf"(?P<num>(?:{_GROUPED}|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|\.\d+)"
    rf"(?:\s*/\s*(?P<den>\d+(?:\.\d+)?))?"
)


def parse_number(text: str) -> float | None:
    """The last number written in ``text`` (see the module docstring), or None."""
    found = list(_NUMBER.finditer(text))
    if not found:
        return None
    match = found[-1]
    value = float(re.sub(r"[,\u202f\u00a0 ]", "", match.group("num")))
    if match.group("den"):
        denominator = float(match.group("den"))
        if denominator == 0:
            return None
        value /= denominator
    return -value if match.group("sign") in ("-", "\u2212") else value


def score_numeric(
    prediction: str, golds: Sequence[str], *, abs_tol: float, rel_tol: float
) -> Verdict:
    """Pass when the last number of ``prediction`` is within tolerance of any gold."""
    value = parse_number(prediction)
    targets = [g for g in (parse_number(str(gold)) for gold in golds) if g is not None]
    if value is None or not targets:
        what = "no number in the answer" if value is None else "no number in the gold"
        return Verdict(
            hard=0.0,
            soft=0.0,
            reason=f"no_number: {what} ({prediction!r} vs {list(golds)!r})",
            check=f"numeric: {what}",
        )
    best_hard, best_soft, closest = 0.0, 0.0, targets[0]
    for gold in targets:
        error = abs(value - gold)
        hard = 1.0 if error <= max(abs_tol, rel_tol * abs(gold)) else 0.0
        soft = 1.0 if hard else max(0.0, 1.0 - error / max(abs(gold), 1e-12))
        if (hard, soft) > (best_hard, best_soft):
            best_hard, best_soft, closest = hard, soft, gold
    if math.isnan(best_soft):
        best_soft = 0.0
    return passed(
        best_hard,
        best_soft,
        failure=f"out_of_tolerance: read {value:g}, expected {closest:g}",
        check=f"numeric: read {value:g}, gold {closest:g} "
        f"(abs_tol={abs_tol:g}, rel_tol={rel_tol:g})",
    )


@dataclass(frozen=True, slots=True)
class NumericScorer:
    name: ClassVar[str] = "numeric"
    abs_tol: float = 0.0
    rel_tol: float = 1e-6

    async def score(self, reply: str, item: Mapping[str, Any], ctx: ScoreContext) -> Verdict:
        return score_numeric(
            extract_answer(reply), golds_of(item), abs_tol=self.abs_tol, rel_tol=self.rel_tol
        )
