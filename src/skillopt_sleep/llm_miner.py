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

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)

from skillopt.backends.base import Completion, CompletionRequest, Role
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
from skillopt.replies import ask_validated, parse_reply
from skillopt.types import ReferenceKind, RuleCheck, TaskOutcome, TaskRecord
from skillopt_sleep.harvest import SELF_MARKER, SessionDigest
from skillopt_sleep.harvest.common import clip
from skillopt_sleep.mine import (
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
    "build_prompt",
    "llm_mine",
]

MAX_TASKS_PER_SESSION = 3
PROMPT_INTENTS = 6
PROMPT_INTENT_CHARS = 240
PROMPT_FINAL_CHARS = 400
EXCHANGE_CHARS = 2000

_log = get_logger(__name__)


class Completer(Protocol):
    async def complete(self, request: CompletionRequest) -> Completion: ...


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


def build_prompt(digest: SessionDigest, *, project: str) -> str:
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
class _Tally:
    dropped_uncheckable: int = 0
    dropped_checks: int = 0
    dropped_short: int = 0
    truncated: int = 0


def _to_tasks(
    reply: MineReply, digest: SessionDigest, *, project: str, tally: _Tally
) -> list[TaskRecord]:
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


def _retry_request(
    request: CompletionRequest, _reply: Completion, problem: str
) -> CompletionRequest:
    """The prompt again, with the problem of the previous reply appended."""
    note = (
        f"\n\nYour previous reply could not be used (bad reply: {sanitize(problem)[:300]}). "
        "Reply again with only the JSON object described above."
    )
    return dataclasses.replace(request, prompt=redact_text(request.prompt + note), sample_id=1)


async def _mine_one(
    pool: Completer,
    digest: SessionDigest,
    *,
    project: str,
    tally: _Tally,
    call_timeout: float | None,
    max_output_tokens: int,
) -> _SessionOutcome:
    prompt = build_prompt(digest, project=project)
    exchanges: list[dict[str, Any]] = []

    async def complete(request: CompletionRequest) -> Completion:
        attempt = len(exchanges)
        try:
            completion = await pool.complete(request)
        except (BackendError, NoHealthyMemberError) as exc:
            exchanges.append({"attempt": attempt, "error": _call_failed(exc)})
            raise
        exchanges.append({"attempt": attempt, "reply": sanitize(completion.text)[:EXCHANGE_CHARS]})
        return completion

    request = CompletionRequest(
        role=Role.OPTIMIZER,
        prompt=prompt,
        stage="mine",
        timeout=call_timeout,
        max_output_tokens=max_output_tokens,
        json_mode=True,
        metadata={"kind": "mine", "session_id": digest.session_id},
    )
    try:
        reply = await ask_validated(
            complete, request, lambda text: parse_reply(text, MineReply), retry=_retry_request
        )
    except (BackendError, NoHealthyMemberError) as exc:
        cause = _call_failed(exc)
    except ReplyFormatError as exc:
        cause = f"bad reply: {sanitize(exc.problems[-1])[:300]}"
    else:
        return _SessionOutcome(
            tasks=_to_tasks(reply.value, digest, project=project, tally=tally),
            prompt=prompt,
            calls=reply.attempts,
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


def _call_failed(exc: BaseException) -> str:
    return f"call failed: {sanitize(str(exc))[:300]}"


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
    tally = _Tally()

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
        done = await gather_indexed(run, len(chosen))
    except* BudgetExceededError as caught:
        raise caught.exceptions[0] from None

    fallbacks = [
        {"session_id": d.session_id, "cause": o.fallback_cause}
        for d, o in zip(chosen, done, strict=True)
        if o.fallback_cause
    ]
    llm_tasks = [t for o in done if not o.fallback_cause for t in o.tasks]
    diagnostics: dict[str, Any] = {
        "sessions": len(chosen),
        "calls": sum(o.calls for o in done),
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
            for d, o in zip(chosen, done, strict=True)
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
    merged = merge_tasks(t for o in done for t in o.tasks)
    kept = merged[: max(0, max_tasks)]
    diagnostics["tasks"] = len(kept)
    diagnostics["truncated"] = len(merged) - len(kept)
    _log.info("mine.llm_done", sessions=len(chosen), tasks=len(kept), fallbacks=len(fallbacks))
    return MineResult(tasks=tuple(kept), miner="llm", diagnostics=diagnostics)
