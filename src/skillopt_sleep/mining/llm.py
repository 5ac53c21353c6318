"""What the LLM miner's model says about one session, and the tasks that makes.

The model answers each session (an entry of a ``mine_batch`` prompt, :mod:`.joint`) with
``{"tasks": [{"intent", "rubric", "checks", "satisfied"}]}`` (:class:`MineReply`, validated
with pydantic). :func:`tasks_from_reply` keeps at most :data:`MAX_TASKS_PER_SESSION` of
them: a rubric wins over checks, invalid checks are dropped, a task with neither (or with
too short an intent) is dropped, and each drop is counted in a :class:`MiningTally`. Ids
are ``llm_<sha12>`` of the normalised intent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, model_validator

from skillopt.errors import DataError
from skillopt.judges import validate_checks
from skillopt.redact import sanitize
from skillopt.types import ReferenceKind, RuleCheck, TaskOutcome, TaskRecord
from skillopt_sleep.harvest import SessionDigest
from skillopt_sleep.harvest.common import clip
from skillopt_sleep.mining.heuristic import MIN_INTENT_CHARS, session_outcome, stable_id

__all__ = [
    "MAX_TASKS_PER_SESSION",
    "PROMPT_FINAL_CHARS",
    "PROMPT_INTENTS",
    "PROMPT_INTENT_CHARS",
    "MineReply",
    "MiningTally",
    "tasks_from_reply",
]

MAX_TASKS_PER_SESSION = 3
#: What a prompt shows of a session: its first messages, each clipped, and its last answer.
PROMPT_INTENTS = 6
PROMPT_INTENT_CHARS = 240
PROMPT_FINAL_CHARS = 400


class _Check(BaseModel):
    model_config = ConfigDict(extra="forbid")
    op: StrictStr
    arg: StrictStr | StrictInt | None = None


class _MinedTask(BaseModel):
    model_config = ConfigDict(extra="ignore")
    intent: StrictStr
    rubric: StrictStr = ""
    checks: list[_Check] = Field(default_factory=list)
    satisfied: StrictBool | None = None


class MineReply(BaseModel):
    """The schema the miner prompt asks for; a bare task list stands for ``{"tasks": [...]}``."""

    model_config = ConfigDict(extra="forbid")
    tasks: list[_MinedTask]

    @model_validator(mode="before")
    @classmethod
    def _bare_list(cls, data: Any) -> Any:
        return {"tasks": data} if isinstance(data, list) else data


@dataclass(slots=True)
class MiningTally:
    """What was dropped from the model's tasks, and why (the diagnostics' counts)."""

    dropped_uncheckable: int = 0
    dropped_checks: int = 0
    dropped_short: int = 0
    dropped_extra: int = 0  # beyond the tasks a session may give


def tasks_from_reply(
    reply: MineReply, digest: SessionDigest, *, project: str, tally: MiningTally
) -> list[TaskRecord]:
    """The usable tasks of ``reply`` as mined from ``digest`` (its source, its outcome when
    the model did not say whether the developer was satisfied)."""
    scope = project or (str(digest.cwd) if digest.cwd else "")
    if len(reply.tasks) > MAX_TASKS_PER_SESSION:
        tally.dropped_extra += len(reply.tasks) - MAX_TASKS_PER_SESSION
    out: list[TaskRecord] = []
    for item in reply.tasks[:MAX_TASKS_PER_SESSION]:
        intent = sanitize(item.intent).strip()
        if len(intent) < MIN_INTENT_CHARS:
            tally.dropped_short += 1
            continue
        rubric = sanitize(item.rubric).strip()
        checks: list[RuleCheck] = []
        for raw in item.checks:
            arg: str | int = raw.arg if raw.arg is not None else ""
            check = RuleCheck(op=raw.op.strip(), arg=arg.strip() if isinstance(arg, str) else arg)
            try:
                validate_checks([check])
            except DataError:
                tally.dropped_checks += 1
                continue
            checks.append(check)
        if not rubric and not checks:
            tally.dropped_uncheckable += 1
            continue
        if item.satisfied is None:
            outcome = session_outcome(digest)
        else:
            outcome = TaskOutcome.SUCCESS if item.satisfied else TaskOutcome.FAIL
        out.append(
            TaskRecord(
                id=stable_id("llm", intent),
                intent=clip(intent, 800),
                reference=rubric,
                reference_kind=ReferenceKind.RUBRIC if rubric else ReferenceKind.RULE,
                checks=tuple(checks),  # beside a rubric: necessary conditions, checked first
                tags=("mined:llm", f"source:{digest.source.value}"),
                skill_hint=digest.skill_hint,
                project=scope,
                outcome=outcome,
                source_sessions=(digest.session_id,),
            )
        )
    return out
