"""A judge's verdicts on an answer: read from its reply, tallied per stage, and the middle
of several.

The night's replayer (:mod:`skillopt_sleep.replay`) asks the model judge; this module holds
what a verdict is once the reply is in: :func:`parse_judge_reply` reads it (or says why it
cannot), :class:`JudgeTally` counts one stage's judgings and their failures, and
:func:`settled` / :func:`middle` decide the middle verdict of an answer judged several
times (``Job.opinions``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from skillopt.errors import ReplyFormatError
from skillopt.judges import RUBRIC_PASS, rubric_result
from skillopt.redact import sanitize
from skillopt.replies import parse_reply
from skillopt.types import JudgeResult

__all__ = [
    "REASON_CHARS",
    "RUBRIC_PASS",
    "JudgeReply",
    "JudgeTally",
    "middle",
    "parse_judge_reply",
    "settled",
    "verdict_score",
]

# A verdict's reason is kept to this many characters (a sentence); the schema asks for no
# more, so a grammar-constrained server ends it there (a small judge's reason otherwise runs
# on until the token cap cuts the reply, its score with it; 200 characters of digits fit a
# 256-token cap, 300 do not). A longer one is still read, and cut.
REASON_CHARS = 200


class JudgeReply(BaseModel):
    model_config = ConfigDict(extra="ignore")
    score: float = Field(ge=0.0, le=1.0)
    reason: str = Field(default="", json_schema_extra={"maxLength": REASON_CHARS})


def parse_judge_reply(text: str) -> JudgeResult:
    """The verdict in a judge reply; :class:`ReplyFormatError` (quoting the reply) if none."""
    try:
        reply = parse_reply(text, JudgeReply)
    except ReplyFormatError as exc:
        raise _unusable(str(exc), text) from exc
    reason = sanitize(reply.reason)[:REASON_CHARS]
    return rubric_result(reply.score, reason, pass_threshold=RUBRIC_PASS)


def _unusable(problem: str, text: str) -> ReplyFormatError:
    quoted = " ".join(text.split())[:120]
    return ReplyFormatError(f"judge reply unusable ({problem}): {quoted!r}", raw=text)


@dataclass(slots=True)
class JudgeTally:
    """The answers that needed the model judge since the last :meth:`take` (one stage's
    worth), and whether their judging failed. An answer judged again (its sample drawn
    again after the judging failed) counts once, by its last verdict."""

    answers: dict[str, bool] = field(default_factory=dict)  # answer key -> judging failed
    causes: Counter[str] = field(default_factory=Counter)

    @property
    def calls(self) -> int:
        return len(self.answers)

    @property
    def failed(self) -> int:
        return sum(self.answers.values())

    def judged(self, key: str, cause: str = "") -> None:
        """One judging of the answer ``key``: failed with ``cause``, or usable."""
        self.answers[key] = bool(cause)
        if cause:
            self.causes[cause] += 1

    def take(self) -> JudgeTally:
        """The counts so far; the tally starts over."""
        taken = JudgeTally(answers=self.answers, causes=self.causes)
        self.answers, self.causes = {}, Counter()
        return taken


def verdict_score(verdict: JudgeResult) -> tuple[float, float]:
    return float(verdict.hard), float(verdict.soft)


def settled(verdicts: Sequence[JudgeResult], of: int) -> bool:
    """Whether one score already holds more than half of ``of`` verdicts: it is then the
    middle one, whatever the verdicts not yet asked would say."""
    return Counter(verdict_score(v) for v in verdicts).most_common(1)[0][1] > of // 2


def middle(verdicts: Sequence[JudgeResult]) -> JudgeResult:
    """The middle verdict by score (of two that agree, either)."""
    return sorted(verdicts, key=verdict_score)[len(verdicts) // 2]
