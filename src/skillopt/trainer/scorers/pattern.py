"""``regex``: the answer matches the item's ``pattern`` (or the config's), case-insensitive
by default; ``fullmatch`` (default) or ``search`` anywhere in the answer."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from skillopt.errors import DataError
from skillopt.trainer.envs.qa import extract_answer
from skillopt.trainer.scorers.base import ScoreContext, Verdict, passed

__all__ = ["RegexScorer", "compile_pattern", "score_regex"]


def compile_pattern(pattern: str, *, ignore_case: bool, where: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise DataError(f"{where}: invalid regular expression {pattern!r} ({exc})") from exc


def score_regex(prediction: str, pattern: re.Pattern[str], *, search: bool) -> Verdict:
    answer = prediction.strip()
    found = pattern.search(answer) if search else pattern.fullmatch(answer)
    hit = 1.0 if found else 0.0
    how = "search" if search else "fullmatch"
    return passed(
        hit,
        hit,
        failure=f"no_match: {answer!r} does not {how} {pattern.pattern!r}",
        check=f"regex {how} {pattern.pattern!r}: {'match' if hit else 'no match'}",
    )


@dataclass(frozen=True, slots=True)
class RegexScorer:
    name: ClassVar[str] = "regex"
    pattern: str = ""  # the default when an item has no "pattern"
    ignore_case: bool = True
    search: bool = False

    async def score(self, reply: str, item: Mapping[str, Any], ctx: ScoreContext) -> Verdict:
        raw = item.get("pattern", self.pattern)
        where = f"item {item.get('id')!r} field 'pattern'"
        if not isinstance(raw, str) or not raw:
            raise DataError(f"{where}: needs a pattern (or options.pattern in the config)")
        compiled = compile_pattern(raw, ignore_case=self.ignore_case, where=where)
        return score_regex(extract_answer(reply), compiled, search=self.search)
