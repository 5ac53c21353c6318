"""``rubric``: the optimizer role judges the answer against the item's rubric.

The rubric is the item's ``rubric`` field: a text, or a list of criteria. The judge replies
with JSON, parsed by the project's one tolerant parser (:mod:`skillopt.replies`, a retry
quoting the problem back when unusable). Tolerated shapes: ``{"score": 0.8}``, a score out
of ten or a percentage (``"7/10"``, ``"80%"``), ``{"passed": true}``, or per-criterion
``{"criteria": [{"met": true}, ...]}`` (the share met). The soft score is the judged share;
a pass needs ``pass_threshold`` (default 1.0: every criterion met). A judge that never
gives a usable reply makes the attempt an error row, not a zero: the answer was not scored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from skillopt.backends.base import CompletionRequest, Role
from skillopt.errors import DataError, ReplyFormatError
from skillopt.redact import sanitize
from skillopt.replies import ask_validated, parse_reply, reply_schema
from skillopt.trainer.envs.qa import extract_answer
from skillopt.trainer.scorers.base import UNSCORED, ScoreContext, Verdict, passed

__all__ = ["JudgeReply", "RubricScorer", "judge_prompt", "parse_judge_reply", "rubric_of"]

_FRACTION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(?:/\s*(\d+(?:\.\d+)?)|(%))?\s*$")

_PROMPT = """You grade one answer against a rubric. Judge only what the rubric asks for.

<question>
{question}
</question>

<rubric>
{rubric}
</rubric>

<answer>
{answer}
</answer>

Reply with one JSON object: {{"criteria": [{{"criterion": "...", "met": true}}, ...],
"score": <the share of the rubric met, 0 to 1>, "reasoning": "<one sentence>"}}"""


def _share(value: Any) -> Any:
    """0..1 from a number, ``"7/10"``, ``"80%"``, or a number above 1 read as out of 10/100."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, str):
        match = _FRACTION.match(value)
        if match is None:
            return value
        number = float(match.group(1))
        if match.group(2):
            return number / float(match.group(2)) if float(match.group(2)) else value
        value = number / 100 if match.group(3) else number
    if isinstance(value, int | float):
        number = float(value)
        if number > 1.0:
            number = number / 10 if number <= 10 else number / 100
        return number
    return value


# A verdict's reasoning is kept to this many characters (a sentence). The schema asks for no
# more, so a grammar-constrained server (llama.cpp, vLLM, Ollama) ends the string there: a
# small judge's reasoning otherwise runs on until the token cap cuts the reply, its score
# with it (issue 31). A longer one from a member that does not enforce it is read, and cut.
REASONING_CHARS = 200


class JudgeReply(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    score: float = Field(ge=0.0, le=1.0)
    reasoning: str = Field(default="", json_schema_extra={"maxLength": REASONING_CHARS})

    @model_validator(mode="before")
    @classmethod
    def _reshape(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out = dict(data)
        criteria = out.get("criteria")
        if "score" not in out and isinstance(criteria, list) and criteria:
            met = [c.get("met") for c in criteria if isinstance(c, dict)]
            flags = [m for m in met if isinstance(m, bool)]
            if flags and len(flags) == len(met):
                out["score"] = sum(flags) / len(flags)
        for key in ("passed", "pass", "verdict"):
            if "score" not in out and key in out:
                flag = out[key]
                if isinstance(flag, str):
                    flag = flag.strip().lower() in ("pass", "passed", "yes", "true", "correct")
                out["score"] = flag
        if "score" in out:
            out["score"] = _share(out["score"])
        if not isinstance(out.get("reasoning", ""), str):
            out["reasoning"] = json.dumps(out["reasoning"])
        if isinstance(out.get("reasoning"), str):
            out["reasoning"] = out["reasoning"][:REASONING_CHARS]
        return out


def parse_judge_reply(text: str) -> JudgeReply:
    return parse_reply(text, JudgeReply)


def rubric_of(item: Mapping[str, Any]) -> str:
    raw = item.get("rubric")
    if isinstance(raw, list) and raw and all(isinstance(c, str) for c in raw):
        return "\n".join(f"- {c}" for c in raw)
    if isinstance(raw, str) and raw.strip():
        return raw.strip()
    raise DataError(f"item {item.get('id')!r}: field 'rubric' must be a text or a list of texts")


def judge_prompt(item: Mapping[str, Any], answer: str) -> str:
    return _PROMPT.format(
        question=str(item.get("question", "")).strip(),
        rubric=rubric_of(item),
        answer=answer.strip() or "(no answer)",
    )


@dataclass(frozen=True, slots=True)
class RubricScorer:
    name: ClassVar[str] = "rubric"
    pass_threshold: float = 1.0

    async def score(self, reply: str, item: Mapping[str, Any], ctx: ScoreContext) -> Verdict:
        if ctx.completer is None:
            raise DataError("the rubric scorer needs the optimizer role (no completer given)")
        answer = extract_answer(reply)
        request = CompletionRequest(
            role=Role.OPTIMIZER,
            prompt=judge_prompt(item, answer),
            stage="judge",
            timeout=ctx.timeout_s,
            max_output_tokens=ctx.max_output_tokens,
            json_mode=True,
            reply_schema=reply_schema(JudgeReply, "verdict"),
            metadata={"judge_item": {"id": item.get("id"), "answer": answer}},
        )
        try:
            judged = await ask_validated(ctx.completer.complete, request, parse_judge_reply)
        except ReplyFormatError as exc:  # the reply is kept with the row, and why
            return Verdict(
                hard=0.0,
                soft=0.0,
                reason=f"{UNSCORED}: {exc}",
                check="rubric: the judge gave no usable verdict",
                extras={UNSCORED: {"problems": list(exc.problems), "reply": sanitize(exc.raw)}},
                error=f"{UNSCORED}: {exc}",
            )
        score = judged.value.score
        hard = 1.0 if score >= self.pass_threshold else 0.0
        return passed(
            hard,
            score,
            failure=f"rubric: judged {score:.2f} (pass at {self.pass_threshold:g}): "
            f"{judged.value.reasoning}",
            check=f"rubric judged {score:.2f}: {judged.value.reasoning}",
        )
