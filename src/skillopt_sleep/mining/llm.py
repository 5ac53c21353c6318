"""LLM miner: ask the optimizer role to turn each session into up to 3 judgeable tasks.

One call per session, all sessions concurrently (the pool bounds concurrency). The reply
must be ``{"tasks": [{"intent", "rubric", "checks", "satisfied"}]}`` (validated with
pydantic). A reply that does not validate is retried once with the error quoted; if the
retry fails too, or the call itself fails, that session falls back to the heuristic
miner and the cause is recorded in ``diagnostics["fallbacks"]``. A rubric wins over
checks; a task with neither (after invalid checks are dropped) is discarded. Ids are
``llm_<sha12>`` of the project and normalised intent. :class:`BudgetExceededError`
propagates: a spend cap stops the night, it is not a reason to fall back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, model_validator

from skillopt.backends.base import Completer, CompletionRequest, Role
from skillopt.concurrency import gather_indexed
from skillopt.errors import (
    BackendError,
    BudgetExceededError,
    DataError,
    NoHealthyMemberError,
    ReplyFormatError,
)
from skillopt.judges import KNOWN_OPS, validate_checks
from skillopt.logging import get_logger
from skillopt.prompts import render_prompt
from skillopt.redact import redact_text, sanitize
from skillopt.replies import parse_reply as shared_parse_reply
from skillopt.types import ReferenceKind, RuleCheck, TaskOutcome, TaskRecord
from skillopt_sleep.harvest import SELF_MARKER, SessionDigest
from skillopt_sleep.harvest.common import clip
from skillopt_sleep.mining.heuristic import (
    MIN_INTENT_CHARS,
    MineResult,
    heuristic_mine,
    merge_tasks,
    session_outcome,
    stable_id,
    task_from_digest,
)

__all__ = [
    "MAX_TASKS_PER_SESSION",
    "Completer",
    "MineReply",
    "MiningTally",
    "SessionMined",
    "build_prompt",
    "llm_mine",
    "tasks_from_reply",
]

MAX_TASKS_PER_SESSION = 3
PROMPT_INTENTS = 6
PROMPT_INTENT_CHARS = 240
PROMPT_FINAL_CHARS = 400
EXCHANGE_CHARS = 2000

_CALL_FAILED = "call failed"

_log = get_logger(__name__)
_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL | re.IGNORECASE)


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


def parse_reply(text: str) -> MineReply:
    """The reply's task list, through the one parser of JSON in model replies."""
    return shared_parse_reply(text, MineReply)


def build_prompt(digest: SessionDigest, *, project: str) -> str:
    """The mining prompt for one session, redacted: it is kept in the diagnostics (what is
    sent is redacted again by the model-call stack)."""
    intents = "\n".join(
        f"{i + 1}. {clip(t, PROMPT_INTENT_CHARS)}"
        for i, t in enumerate(digest.user_intents[:PROMPT_INTENTS])
    )
    prompt = render_prompt(
        "mine",
        marker=SELF_MARKER,
        project=project or str(digest.cwd or "(unknown)"),
        intents=intents,
        final_answer=clip(digest.final_answer, PROMPT_FINAL_CHARS) or "(none)",
        feedback=", ".join(s.label() for s in digest.feedback[:6]) or "(none detected)",
        tools=", ".join(digest.tools_used[:12]) or "(none)",
        ops=", ".join(sorted(KNOWN_OPS)),
    )
    return redact_text(prompt)


@dataclass(slots=True)
class MiningTally:
    """What was dropped from the model's tasks, and why (the diagnostics' counts)."""

    dropped_uncheckable: int = 0
    dropped_checks: int = 0
    dropped_short: int = 0
    truncated: int = 0


def tasks_from_reply(
    reply: MineReply, digest: SessionDigest, *, project: str, tally: MiningTally
) -> list[TaskRecord]:
    """The usable tasks of ``reply`` as mined from ``digest`` (its source, its outcome when
    the model did not say whether the developer was satisfied)."""
    scope = project or (str(digest.cwd) if digest.cwd else "")
    if len(reply.tasks) > MAX_TASKS_PER_SESSION:
        tally.truncated += len(reply.tasks) - MAX_TASKS_PER_SESSION
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
                checks=() if rubric else tuple(checks),
                tags=("mined:llm", f"source:{digest.source.value}"),
                skill_hint=digest.skill_hint,
                project=scope,
                outcome=outcome,
                source_sessions=(digest.session_id,),
            )
        )
    return out


@dataclass(slots=True)
class _SessionOutcome:
    tasks: list[TaskRecord]
    prompt: str = ""
    fallback_cause: str = ""
    calls: int = 0
    exchanges: tuple[dict[str, Any], ...] = ()


async def _mine_one(
    pool: Completer,
    digest: SessionDigest,
    *,
    project: str,
    tally: MiningTally,
    call_timeout: float | None,
    max_output_tokens: int,
) -> _SessionOutcome:
    prompt = build_prompt(digest, project=project)
    exchanges: list[dict[str, Any]] = []
    cause = ""
    for attempt in range(2):
        text = prompt
        if attempt:
            text = (
                f"{prompt}\n\nYour previous reply could not be used ({cause}). "
                "Reply again with only the JSON object described above."
            )
        request = CompletionRequest(
            role=Role.OPTIMIZER,
            prompt=text,
            stage="mine",
            sample_id=attempt,
            timeout=call_timeout,
            max_output_tokens=max_output_tokens,
            json_mode=True,
            metadata={"kind": "mine", "session_id": digest.session_id},
        )
        try:
            completion = await pool.complete(request)
        except (BackendError, NoHealthyMemberError) as exc:
            cause = f"{_CALL_FAILED}: {sanitize(str(exc))[:300]}"
            exchanges.append({"attempt": attempt, "error": cause})
            break
        exchanges.append({"attempt": attempt, "reply": sanitize(completion.text)[:EXCHANGE_CHARS]})
        try:
            reply = parse_reply(completion.text)
        except ReplyFormatError as exc:
            cause = f"bad reply: {sanitize(str(exc))[:300]}"
            continue
        return _SessionOutcome(
            tasks=tasks_from_reply(reply, digest, project=project, tally=tally),
            prompt=prompt,
            calls=attempt + 1,
            exchanges=tuple(exchanges),
        )
    fallback = task_from_digest(digest, project=project)
    return _SessionOutcome(
        tasks=[fallback] if fallback else [],
        prompt=prompt,
        fallback_cause=cause,
        calls=len(exchanges),
        exchanges=tuple(exchanges),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionMined:
    """What mining one session produced: the unit the night's mining cache keeps.
    ``fallback_cause`` is set when the session fell back to the heuristic task."""

    tasks: tuple[TaskRecord, ...]
    calls: int
    fallback_cause: str = ""
    call_failed: bool = False  # the model could not be reached: worth trying again later
    prompt: str = ""
    exchanges: tuple[dict[str, Any], ...] = ()


async def mine_session(
    pool: Completer,
    digest: SessionDigest,
    *,
    project: str = "",
    call_timeout: float | None = None,
    max_output_tokens: int = 1200,
) -> SessionMined:
    """Mine one session with the optimizer role (see the module docstring)."""
    outcome = await _mine_one(
        pool,
        digest,
        project=project,
        tally=MiningTally(),
        call_timeout=call_timeout,
        max_output_tokens=max_output_tokens,
    )
    return SessionMined(
        tasks=tuple(outcome.tasks),
        calls=outcome.calls,
        fallback_cause=outcome.fallback_cause,
        call_failed=outcome.fallback_cause.startswith(_CALL_FAILED),
        prompt=outcome.prompt,
        exchanges=outcome.exchanges,
    )


async def llm_mine(
    pool: Completer,
    digests: Sequence[SessionDigest],
    *,
    project: str = "",
    max_tasks: int = 40,
    max_sessions: int | None = None,
    call_timeout: float | None = None,
    max_output_tokens: int = 1200,
) -> MineResult:
    """Mine ``digests`` (newest first) with the optimizer role; see the module docstring."""
    chosen = [d for d in digests[: max_sessions or len(digests)] if d.user_intents]
    tally = MiningTally()

    async def run(index: int) -> _SessionOutcome:
        return await _mine_one(
            pool,
            chosen[index],
            project=project,
            tally=tally,
            call_timeout=call_timeout,
            max_output_tokens=max_output_tokens,
        )

    try:
        outcomes = await gather_indexed(run, len(chosen))
    except* BudgetExceededError as caught:
        raise caught.exceptions[0] from None

    fallbacks = [
        {"session_id": d.session_id, "cause": o.fallback_cause}
        for d, o in zip(chosen, outcomes, strict=True)
        if o.fallback_cause
    ]
    llm_tasks = [t for o in outcomes if not o.fallback_cause for t in o.tasks]
    diagnostics: dict[str, Any] = {
        "sessions": len(chosen),
        "calls": sum(o.calls for o in outcomes),
        "fallbacks": fallbacks,
        "dropped_uncheckable": tally.dropped_uncheckable,
        "dropped_checks": tally.dropped_checks,
        "dropped_short": tally.dropped_short,
        "truncated_per_session": tally.truncated,
        "exchanges": [
            {
                "session_id": d.session_id,
                "prompt": o.prompt[:EXCHANGE_CHARS],
                "attempts": list(o.exchanges),
            }
            for d, o in zip(chosen, outcomes, strict=True)
        ],
    }
    if not llm_tasks:
        fallback = heuristic_mine(digests, project=project, max_tasks=max_tasks)
        diagnostics["fallback_all"] = "the LLM miner produced no usable task"
        _log.warning("mine.llm_empty", sessions=len(chosen), fallbacks=len(fallbacks))
        return MineResult(
            tasks=fallback.tasks,
            miner="heuristic",
            diagnostics={**diagnostics, "heuristic": fallback.diagnostics},
        )
    merged = merge_tasks(t for o in outcomes for t in o.tasks)
    kept = merged[: max(0, max_tasks)]
    diagnostics["tasks"] = len(kept)
    diagnostics["truncated"] = len(merged) - len(kept)
    _log.info("mine.llm_done", sessions=len(chosen), tasks=len(kept), fallbacks=len(fallbacks))
    return MineResult(tasks=tuple(kept), miner="llm", diagnostics=diagnostics)
