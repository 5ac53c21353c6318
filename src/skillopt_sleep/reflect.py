"""Reflection: turn judged rollouts into at most ``budget`` proposed edits.

Contrastive first: tasks whose K samples scored differently show what a better attempt
does, so the optimizer compares good and bad attempts of the same task. The tasks that
failed on every attempt are shown beside the groups: under a noisy model the tasks with a
spread are a random draw (whichever samples the noise flipped), and reflecting on them
alone would hide every lesson only the steady failures teach. When no task has a spread
(or that reply yields nothing), single-shot reflection over the failures runs.
The reply must be a JSON array of edits; it is validated, retried once with a note, and
truncated to the budget. Every raw reply is kept for diagnostics.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter

from skillopt.backends.base import Completer, Completion, CompletionRequest, ReplySchema, Role
from skillopt.errors import (
    AnswerPendingError,
    BackendError,
    BudgetExceededError,
    NoHealthyMemberError,
    ReplyFormatError,
)
from skillopt.progress import Progress
from skillopt.prompts import render_prompt
from skillopt.redact import sanitize
from skillopt.replies import ask_validated, parse_reply, reply_schema
from skillopt.types import EditRecord, EditTarget, RolloutResult, TaskRecord
from skillopt.unmeant_edits import unmeant_reason
from skillopt_sleep.replay import Docs, clean, task_hint

__all__ = [
    "ReflectMode",
    "ReflectOutcome",
    "Reflector",
    "RolloutSet",
    "parse_edits",
]

MAX_GROUPS = 6
MAX_FAILURES = 8
SNIPPET = 240
RETRY_NOTE = "Your previous reply could not be used: {why}. Reply again with ONLY the JSON array."


class ReflectMode(StrEnum):
    CONTRASTIVE = "contrastive"
    SINGLE = "single"
    NONE = "none"


# Bounds on a reflection's strings, in its JSON schema only (a reply is read whatever its
# lengths): a grammar-constrained member (llama.cpp, vLLM, Ollama) ends a string there,
# where a small model otherwise runs on ("This is a task. This is a task. ...") until the
# token cap cuts the reply, every edit with it (issue 31, as the trainer's analyst).
_RULE = {"maxLength": 400}
_WHY = {"maxLength": 200}


class _Edit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    op: Literal["add", "append", "insert_after", "replace", "delete"] = "add"
    content: str = Field(default="", json_schema_extra=_RULE)
    anchor: str = Field(default="", json_schema_extra=_RULE)
    rationale: str = Field(default="", json_schema_extra=_WHY)


def _edit_list(data: Any) -> Any:
    """``{"edits": [...]}`` (or any object with a single list) stands for the list."""
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        if isinstance(data.get("edits"), list):
            return data["edits"]
        if len(lists) == 1:
            return lists[0]
    return data


_EDITS = TypeAdapter(Annotated[list[_Edit], BeforeValidator(_edit_list)])


class EditsReply(BaseModel):
    """The shape a reflection is asked in by schema (a root object, as structured outputs
    want); :data:`_EDITS` reads it, the bare list the prompt shows, and other wrappings."""

    edits: list[_Edit]


def edits_shape(budget: int) -> ReplySchema:
    """The reflection reply's schema, its bounded form holding at most ``budget`` edits
    (what the prompt asks for): a small model that repeats an edit is stopped there, with
    room left in its token cap to close the reply (a reply cut inside its list keeps none)."""
    shape = reply_schema(EditsReply, "edits")
    bounded = copy.deepcopy(shape.bounded or shape.schema)
    bounded["properties"]["edits"]["maxItems"] = max(1, budget)
    return dataclasses.replace(shape, bounded=bounded)


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutSet:
    """The K judged samples of one train task under the same documents."""

    task: TaskRecord
    results: tuple[RolloutResult, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReflectOutcome:
    edits: tuple[EditRecord, ...]
    mode: ReflectMode
    reason: str = ""  # why there are no edits, when there are none
    raw: tuple[str, ...] = ()  # every raw reply, redacted
    calls: int = 0
    errors: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()  # edits that could not be meant, and why (no trial)

    def to_dict(self) -> dict[str, Any]:
        return {
            "edits": [e.to_dict() for e in self.edits],
            "mode": self.mode.value,
            "reason": self.reason,
            "raw": list(self.raw),
            "calls": self.calls,
            "errors": list(self.errors),
            "refused": list(self.refused),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReflectOutcome:
        return cls(
            edits=tuple(EditRecord.from_dict(e) for e in data.get("edits", [])),
            mode=ReflectMode(data.get("mode", "none")),
            reason=str(data.get("reason", "")),
            raw=tuple(data.get("raw", [])),
            calls=int(data.get("calls", 0)),
            errors=tuple(data.get("errors", [])),
            refused=tuple(data.get("refused", [])),
        )


def parse_edits(
    text: str,
    *,
    target: EditTarget,
    budget: int,
    template: str = "",
    refused: list[str] | None = None,
) -> list[EditRecord]:
    """Validate a reply as a JSON array of edits; raise :class:`ReplyFormatError` if not.

    With the prompt's ``template`` named, an edit that cannot be meant (the prompt's own
    example, a placeholder, its instructions: :func:`unmeant_reason`) is left out before
    any trial, and why is appended to ``refused``; it is no format problem, so it costs
    no retry."""
    items = parse_reply(text, _EDITS)
    edits = []
    for item in items:
        content = sanitize(item.content).strip()
        anchor = sanitize(item.anchor).strip()
        if not content and not (item.op == "delete" and anchor):
            continue
        why = unmeant_reason(content, template=template) if template and content else ""
        if why:
            if refused is not None:
                refused.append(f"{item.op} edit refused: {why}")
            continue
        edits.append(
            EditRecord(
                target=target,
                op=item.op,
                content=content,
                anchor=anchor,
                rationale=sanitize(item.rationale).strip()[:400],
            )
        )
    return edits[: max(0, budget)]


@dataclass(kw_only=True)
class Reflector:
    pool: Completer
    marker: str
    preferences: str = ""
    score: Callable[[RolloutResult], float] = lambda r: r.hard
    evidence: Callable[[list[dict[str, Any]]], None] | None = None
    max_output_tokens: int = 1500
    progress: Progress | None = None
    _log: list[str] = field(default_factory=list)

    async def reflect(
        self, *, target: EditTarget, docs: Docs, sets: Sequence[RolloutSet], budget: int
    ) -> ReflectOutcome:
        if budget <= 0:
            return ReflectOutcome(edits=(), mode=ReflectMode.NONE, reason="edit budget is 0")
        usable = [
            RolloutSet(task=s.task, results=tuple(r for r in s.results if not r.error))
            for s in sets
        ]
        usable = [s for s in usable if s.results]
        if not usable:
            return ReflectOutcome(
                edits=(), mode=ReflectMode.NONE, reason="no usable rollouts to learn from"
            )
        raws: list[str] = []
        errors: list[str] = []
        refused: list[str] = []  # edits that could not be meant (never tried)
        calls = 0
        spread = sorted((s for s in usable if self._spread(s) > 0), key=self._spread, reverse=True)[
            :MAX_GROUPS
        ]
        if spread:
            steady = [s for s in usable if self._spread(s) == 0 and _fails(s)][:MAX_FAILURES]
            edits, n, raw, errs = await self._ask(
                "reflect_contrastive", target=target, docs=docs, budget=budget,
                sets=[*spread, *steady], refused=refused,
            )  # fmt: skip
            calls, raws, errors = calls + n, raws + raw, errors + errs
            if edits or _waits(errs):  # handoff: no fallback prompt before this one's answer
                return ReflectOutcome(
                    edits=tuple(edits),
                    mode=ReflectMode.CONTRASTIVE,
                    raw=tuple(raws),
                    calls=calls,
                    errors=tuple(errors),
                    refused=tuple(refused),
                )
        failing = [s for s in usable if min(r.hard for r in s.results) < 1.0]
        if not failing:
            return ReflectOutcome(
                edits=(),
                mode=ReflectMode.NONE,
                reason="every train task already succeeds: nothing to learn",
                raw=tuple(raws),
                calls=calls,
                errors=tuple(errors),
                refused=tuple(refused),
            )
        edits, n, raw, errs = await self._ask(
            "reflect", target=target, docs=docs, budget=budget, sets=usable, refused=refused
        )
        calls, raws, errors = calls + n, raws + raw, errors + errs
        reason = ""
        if not edits and refused and len(errs) < n:  # its last reply was read, and refused
            reason = f"every edit proposed was refused before any trial: {refused[-1]}"
        elif not edits:
            reason = (
                f"reflection failed: {errors[-1]}"
                if errors
                else "the optimizer proposed no usable edit"
            )
        return ReflectOutcome(
            edits=tuple(edits),
            mode=ReflectMode.SINGLE,
            reason=reason,
            raw=tuple(raws),
            calls=calls,
            errors=tuple(errors),
            refused=tuple(refused),
        )

    def _spread(self, s: RolloutSet) -> float:
        scores = [self.score(r) for r in s.results]
        return max(scores) - min(scores)

    async def _ask(
        self,
        template: str,
        *,
        target: EditTarget,
        docs: Docs,
        budget: int,
        sets: Sequence[RolloutSet],
        refused: list[str],
    ) -> tuple[list[EditRecord], int, list[str], list[str]]:
        values = self._values(template, target=target, docs=docs, budget=budget, sets=sets)
        failures = [task_hint(s.task) for s in sets if min(r.hard for r in s.results) < 1.0]
        metadata = {
            "stage": template,
            "target": target.value,
            "skill": clean(docs.skill),
            "memory": clean(docs.memory),
            "failures": failures,
            "edit_budget": budget,
        }
        raws: list[str] = []
        errors: list[str] = []
        calls = 0

        async def complete(request: CompletionRequest) -> Completion:
            nonlocal calls
            attempt, calls = calls, calls + 1
            if self.progress is not None:
                self.progress.calls_planned(1)
            try:
                done = await self.pool.complete(request)
            except (BackendError, NoHealthyMemberError, BudgetExceededError):
                if self.progress is not None:
                    self.progress.call_done(ok=False)
                raise
            if self.progress is not None and done.cached:
                self.progress.call_done(ok=True, cached=True)  # no model call: shown apart
            elif self.progress is not None:
                self.progress.call_done(ok=True)
            raw = sanitize(done.text)
            raws.append(raw)
            if self.evidence is not None:
                self.evidence(
                    [{"phase": "reflect", "kind": template, "target": target.value,
                      "attempt": attempt, "prompt": request.prompt, "reply": raw}]
                )  # fmt: skip
            return done

        def retry(
            request: CompletionRequest, _reply: Completion, problem: str
        ) -> CompletionRequest:
            errors.append(sanitize(problem))
            note = RETRY_NOTE.format(why=sanitize(problem))
            prompt = render_prompt(template, retry_note=note, **values)
            return dataclasses.replace(request, prompt=prompt, use_cache=False, sample_id=1)

        try:
            reply = await ask_validated(
                complete,
                self._request(
                    render_prompt(template, retry_note="", **values), metadata, budget=budget
                ),
                lambda text: parse_edits(
                    text, target=target, budget=budget, template=template, refused=refused
                ),
                retry=retry,
            )
        except (BackendError, NoHealthyMemberError, BudgetExceededError) as exc:
            errors.append(sanitize(f"{getattr(exc, 'error_class', type(exc).__name__)}: {exc}"))
            return [], calls, raws, errors
        except ReplyFormatError as exc:
            errors.append(sanitize(exc.problems[-1]))
            return [], calls, raws, errors
        return reply.value, calls, raws, errors

    def _request(self, prompt: str, metadata: dict[str, Any], *, budget: int) -> CompletionRequest:
        """A reflection's request: its reply is edits, asked for by their schema (at most
        the reflection's edit budget of them)."""
        return CompletionRequest(
            role=Role.OPTIMIZER,
            prompt=prompt,
            stage="reflect",
            max_output_tokens=self.max_output_tokens,
            reply_schema=edits_shape(budget),
            metadata=metadata,
        )

    def _values(
        self,
        template: str,
        *,
        target: EditTarget,
        docs: Docs,
        budget: int,
        sets: Sequence[RolloutSet],
    ) -> dict[str, Any]:
        document = docs.skill if target is EditTarget.SKILL else docs.memory
        other = docs.memory if target is EditTarget.SKILL else docs.skill
        criteria: Counter[str] = Counter()
        for s in sets:
            for r in s.results:
                criteria.update(r.failed_criteria)
        contracts = [s.task.system_contract for s in sets if s.task.system_contract]
        values: dict[str, Any] = {
            "marker": self.marker,
            "target": target.value,
            "edit_budget": budget,
            "document": sanitize(document) or "(empty)",
            "other_document": sanitize(other) or "(empty)",
            "preferences": sanitize(self.preferences) or "(none stated)",
            "contract": sanitize(contracts[0])[:900] if contracts else "(none)",
            "criteria": "\n".join(f'- "{c}" (failed {n}x)' for c, n in criteria.most_common(12))
            or "(no structured criteria; see the judge reasons below)",
        }
        if template == "reflect_contrastive":
            groups = [s for s in sets if self._spread(s) > 0]
            steady = [s for s in sets if self._spread(s) == 0]
            values["groups"] = "\n\n".join(self._group_text(s) for s in groups)
            values["failures"] = (
                "\n\n".join(_case(s.task, s.results[0]) for s in steady) or "(none)"
            )
        else:
            failures = [(s.task, r) for s in sets for r in s.results[:1] if r.hard < 1.0][
                :MAX_FAILURES
            ]
            wins = [(s.task, r) for s in sets for r in s.results[:1] if r.hard >= 1.0][:4]
            values["failures"] = "\n\n".join(_case(t, r) for t, r in failures) or "(none)"
            values["successes"] = "\n\n".join(_case(t, r) for t, r in wins) or "(none)"
        return values

    def _group_text(self, s: RolloutSet) -> str:
        ranked = sorted(s.results, key=self.score, reverse=True)
        lines = [f"## Task: {_clip(s.task.intent)}"]
        for r in ranked:
            lines.append(
                f"- score {self.score(r):.2f}: {_clip(r.response)}"
                + (f" (judge: {_clip(r.reason, 120)})" if r.reason else "")
            )
        return "\n".join(lines)


def _fails(s: RolloutSet) -> bool:
    return min(r.hard for r in s.results) < 1.0


def _clip(text: str, n: int = SNIPPET) -> str:
    flat = " ".join(sanitize(text).split())
    return flat if len(flat) <= n else flat[: n - 1] + "…"


def _case(task: TaskRecord, result: RolloutResult) -> str:
    return (
        f"- asked: {_clip(task.intent)}\n  answered: {_clip(result.response)}\n"
        f"  judged: {_clip(result.reason or 'below threshold', 160)}"
    )


def _waits(errors: Sequence[str]) -> bool:
    """The call ended waiting for its answer (handoff mode), not failed."""
    return any(e.startswith(f"{AnswerPendingError.error_class_name}:") for e in errors)
