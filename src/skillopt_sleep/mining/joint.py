"""One mining call for several requests: the shared prompt, its reply read entry by entry.

1. :func:`entry_text` renders a :class:`RequestGroup` as one labelled entry (``# Session
   S3``): the newest session's messages (its opening in a wording with no secret pasted
   in, when a session of the group has one), then the ones the group's other sessions
   added; the newest last answer; the reactions and tools of all of them. Redacted.
2. :func:`mine_joint` sends the ``mine_batch`` prompt (instructions first, entries last)
   for a run of groups and reads the reply per entry (:func:`read_reply`): an entry that is
   missing or does not validate does not cost the others theirs. Only those are asked
   again, once, in a prompt of their own; one still unanswered falls back to the heuristic
   task of each of its sessions, with the cause. A failed call (the model unreachable)
   falls back the same way and is flagged, so the caller does not cache it.
3. Every session of a group gets the entry's tasks as its own (its source tag, and its
   own outcome when the model did not say whether the developer was satisfied).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ValidationError

from skillopt.backends.base import EARLIER_PROBLEM, Completer, CompletionRequest, Role, Usage
from skillopt.errors import BackendError, NoHealthyMemberError, ReplyFormatError
from skillopt.judges import KNOWN_OPS
from skillopt.prompts import render_prompt
from skillopt.redact import redact_text, sanitize
from skillopt.replies import json_values, reply_schema
from skillopt.types import TaskRecord
from skillopt_sleep.harvest import SELF_MARKER
from skillopt_sleep.harvest.common import clip
from skillopt_sleep.mining.groups import RequestGroup
from skillopt_sleep.mining.heuristic import normalise_intent, opening_index, task_from_digest
from skillopt_sleep.mining.llm import (
    PROMPT_FINAL_CHARS,
    PROMPT_INTENT_CHARS,
    PROMPT_INTENTS,
    MineReply,
    MiningTally,
    tasks_from_reply,
)

__all__ = [
    "REPLY_TOKENS_PER_ENTRY",
    "JointMined",
    "SessionMined",
    "call_overhead",
    "entry_cost",
    "entry_text",
    "mine_joint",
    "read_reply",
]

#: Reply tokens reserved per entry when packing a call (three tasks of a few lines each).
REPLY_TOKENS_PER_ENTRY = 400
#: The reply allowance of a call with few entries (what one session's call had before).
MIN_OUTPUT_TOKENS = 1200
#: Messages shown for a group of several sessions (one session shows PROMPT_INTENTS).
GROUP_INTENTS = 10
_CALL_FAILED = "call failed"
_PROBLEM_CHARS = 300
_REDACTION = "[REDACTED:"  # what stands for a secret, in a digest or once redacted


def _tokens(text: str) -> int:
    return Usage.estimate(text, "").prompt_tokens


def _clean_opening(group: RequestGroup) -> str | None:
    """The group's request in a wording one of its sessions opened with that holds no
    secret: a model copies the request it is shown, and a task should replay the request,
    not a redaction marker."""
    openings = (d.user_intents[i] for d in group.sessions if (i := opening_index(d)) is not None)
    return next((text for text in openings if _REDACTION not in redact_text(text)), None)


def _asked(group: RequestGroup) -> list[str]:
    """The newest session's messages (its opening in a wording without a secret when the
    group has one), then what the others said after their opening."""
    asked = list(group.newest.user_intents[:PROMPT_INTENTS])
    lead, clean = opening_index(group.newest), _clean_opening(group)
    if lead is not None and lead < len(asked) and clean is not None:
        asked[lead] = clean
    seen = {normalise_intent(t) for t in asked}
    for other in group.sessions[1:]:
        later = other.user_intents[(opening_index(other) or 0) + 1 :]
        for text in later:
            key = normalise_intent(text)
            if len(asked) < GROUP_INTENTS and key not in seen:
                asked.append(text)
                seen.add(key)
    return asked


def entry_text(group: RequestGroup, label: str) -> str:
    """The prompt entry of ``group`` under ``label`` (redacted)."""
    sessions = group.sessions
    intents = "\n".join(
        f"{i + 1}. {clip(t, PROMPT_INTENT_CHARS)}" for i, t in enumerate(_asked(group))
    )
    feedback = list(dict.fromkeys(s.label() for d in sessions for s in d.feedback))
    tools = list(dict.fromkeys(t for d in sessions for t in d.tools_used))
    text = render_prompt(
        "mine_batch_entry",
        label=label,
        asked_in=f" (asked in {len(sessions)} sessions)" if len(sessions) > 1 else "",
        intents=intents,
        final_answer=clip(group.newest.final_answer, PROMPT_FINAL_CHARS) or "(none)",
        feedback=", ".join(feedback[:6]) or "(none detected)",
        tools=", ".join(tools[:12]) or "(none)",
    )
    return redact_text(text)


def _prompt(entries: Sequence[str], *, project: str) -> str:
    prompt = render_prompt(
        "mine_batch",
        marker=SELF_MARKER,
        project=project or "(unknown)",
        ops=", ".join(sorted(KNOWN_OPS)),
        sessions="\n\n".join(entries),
    )
    return redact_text(prompt)


def call_overhead(*, project: str) -> int:
    """Tokens every mining call carries whatever its entries (instructions, project)."""
    return _tokens(_prompt((), project=project))


def entry_cost(text: str) -> int:
    """Tokens an entry adds to a call: its text and the reply it may need."""
    return _tokens(text) + REPLY_TOKENS_PER_ENTRY


def _label(raw: Any) -> str:
    if isinstance(raw, bool):
        return ""
    if isinstance(raw, int):
        return f"S{raw}"
    if isinstance(raw, str):
        text = raw.strip().upper()
        return f"S{text}" if text.isdigit() else text
    return ""


class SessionAnswer(MineReply):
    """One entry's answer in a shared call: its label and its tasks (as one session's)."""

    session: str


class JointReply(BaseModel):
    """The shape a shared mining call is asked in by schema; :func:`read_reply` reads it
    entry by entry (and the other shapes models give), so one bad entry spoils no other."""

    sessions: list[SessionAnswer]


def _entries(value: Any) -> list[Any] | None:
    if isinstance(value, dict) and isinstance(value.get("sessions"), list):
        return list(value["sessions"])
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return value if all("session" in v for v in value) else None
    return None


def _problem(label: str, exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(root)"
    return f"{label}: {where}: {first['msg']}"


def read_reply(text: str, labels: Sequence[str]) -> tuple[dict[str, MineReply], str]:
    """The usable answer of each entry the reply holds, by label, and (when some label has
    none) what was wrong. A lone entry may be answered in the one-session shape
    (``{"tasks": [...]}``)."""
    wanted = set(labels)
    answers: dict[str, MineReply] = {}
    problems: list[str] = []
    values = json_values(text)
    for value in values:
        for item in _entries(value) or ():
            label = _label(item.get("session")) if isinstance(item, dict) else ""
            if label not in wanted or label in answers:
                continue
            try:
                answers[label] = MineReply.model_validate({"tasks": item.get("tasks")})
            except ValidationError as exc:
                problems.append(_problem(label, exc))
    if len(labels) == 1 and not answers:
        for value in values:
            try:
                answers[labels[0]] = MineReply.model_validate(value)
                break
            except ValidationError:
                continue
    missing = [label for label in labels if label not in answers]
    if not missing:
        return answers, ""
    if problems:
        return answers, "; ".join(problems)
    if not values:
        return answers, "no JSON in the reply"
    return answers, f"no answer for {', '.join(missing)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionMined:
    """What one session got from a shared call (what the mining cache keeps of it).
    ``fallback_cause`` is set when the session fell back to its heuristic task."""

    tasks: tuple[TaskRecord, ...]
    calls: int
    fallback_cause: str = ""
    call_failed: bool = False  # the model could not be reached: worth trying again later


@dataclass(frozen=True, slots=True, kw_only=True)
class JointMined:
    """What one shared call (and its re-ask) yielded: per session, in the groups' order."""

    sessions: tuple[tuple[str, SessionMined], ...]  # (session path, what it yielded)
    calls: int
    reasked: int  # entries asked again


@dataclass(frozen=True, slots=True)
class _Entry:
    label: str
    group: RequestGroup
    text: str


def _answer_check(labels: Sequence[str]) -> Callable[[str], object]:
    """An answer written by hand (handoff) must give every entry its tasks, as
    :func:`read_reply` reads them: otherwise it is refused with the reason."""

    def check(text: str) -> object:
        answers, problem = read_reply(text, labels)
        if problem:
            raise ReplyFormatError(f"mined tasks unusable ({problem})", raw=text)
        return answers

    return check


def _reask_note(pending: Sequence[_Entry], cause: str) -> str:
    labels = ", ".join(e.label for e in pending)
    return (
        f"\n\nYour previous reply could not be used for {labels} ({cause}). Reply again with "
        "only the JSON object described above, one entry for each of these sessions."
    )


def _yielded(
    entry: _Entry, reply: MineReply | None, *, project: str, cause: str, failed: bool,
    tally: MiningTally,
) -> list[tuple[str, SessionMined]]:  # fmt: skip
    out: list[tuple[str, SessionMined]] = []
    for i, digest in enumerate(entry.group.sessions):
        if reply is not None:
            own = tally if i == 0 else MiningTally()  # count the entry's drops once
            tasks = tasks_from_reply(reply, digest, project=project, tally=own)
            mined = SessionMined(tasks=tuple(tasks), calls=0)
        else:
            fallback = task_from_digest(digest, project=project)
            mined = SessionMined(
                tasks=(fallback,) if fallback else (),
                calls=0,
                fallback_cause=cause,
                call_failed=failed,
            )
        out.append((str(digest.path), mined))
    return out


async def mine_joint(
    pool: Completer,
    groups: Sequence[RequestGroup],
    *,
    project: str,
    tally: MiningTally,
    call_timeout: float | None = None,
) -> JointMined:
    """Mine ``groups`` in one call (plus at most one re-ask); see the module docstring.
    :class:`BudgetExceededError` propagates."""
    entries = [
        _Entry(f"S{i + 1}", group, entry_text(group, f"S{i + 1}")) for i, group in enumerate(groups)
    ]
    answers: dict[str, MineReply] = {}
    pending = entries
    cause, failed, calls, reasked = "", False, 0, 0
    for attempt in range(2):
        prompt = _prompt([e.text for e in pending], project=project)
        if attempt:
            prompt += _reask_note(pending, cause)
            reasked += len(pending)
        request = CompletionRequest(
            role=Role.OPTIMIZER,
            prompt=prompt,
            stage="mine",
            sample_id=attempt,
            timeout=call_timeout,
            max_output_tokens=max(MIN_OUTPUT_TOKENS, REPLY_TOKENS_PER_ENTRY * len(pending)),
            json_mode=True,
            check_answer=_answer_check([e.label for e in pending]),
            reply_schema=reply_schema(JointReply, "mined_tasks"),
            metadata={
                **({EARLIER_PROBLEM: cause} if attempt else {}),
                "kind": "mine",
                "labels": [e.label for e in pending],
                "session_ids": [d.session_id for e in pending for d in e.group.sessions],
            },
        )
        try:
            completion = await pool.complete(request)
        except (BackendError, NoHealthyMemberError) as exc:
            cause, failed = f"{_CALL_FAILED}: {sanitize(str(exc))[:_PROBLEM_CHARS]}", True
            break
        calls += 1
        got, problem = read_reply(completion.text, [e.label for e in pending])
        answers.update(got)
        pending = [e for e in pending if e.label not in answers]
        if not pending:
            break
        cause = f"bad reply: {sanitize(problem)[:_PROBLEM_CHARS]}"
    yielded = [
        pair
        for e in entries
        for pair in _yielded(
            e, answers.get(e.label), project=project, cause=cause, failed=failed, tally=tally
        )
    ]
    if yielded:  # the call is paid once: by the first session it served
        path, first = yielded[0]
        yielded[0] = (path, replace(first, calls=calls))
    return JointMined(sessions=tuple(yielded), calls=calls, reasked=reasked)
