"""JSON reply schemas of the optimizer prompts, and one validated call with a single retry.

Model replies are foreign input: unknown keys are ignored, but every field we use is typed
and checked. A reply that fails twice raises :class:`ReplyFormatError` carrying the raw text;
the caller decides the documented fallback (merge -> concatenation, rank -> first k, ...).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from skillopt.backends.base import Completion, CompletionRequest, Message, Role
from skillopt.errors import ReplyFormatError
from skillopt.redact import redact_text
from skillopt.trainer.envs.base import Completer

__all__ = [
    "AnalystFullReply",
    "AnalystReply",
    "BudgetReply",
    "ConsolidateReply",
    "EditItem",
    "FullCandidate",
    "MergeFullReply",
    "MergeReply",
    "MetaSkillReply",
    "RankReply",
    "RewriteReply",
    "SlowUpdateReply",
    "SourceType",
    "ValidatedReply",
    "ask_json",
    "coerce_edit_count",
    "extract_json_object",
]


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class SourceType(StrEnum):
    FAILURE = "failure"
    SUCCESS = "success"


class EditItem(_Reply):
    op: str
    target: str = ""
    content: str = ""
    support_count: int = Field(default=1, ge=0)
    source_type: SourceType = SourceType.FAILURE
    merge_level: int = 0

    @field_validator("op")
    @classmethod
    def _known_op(cls, value: str) -> str:
        op = value.strip().lower()
        if op not in {"append", "add", "insert_after", "replace", "delete", "rewrite"}:
            raise ValueError(f"unknown op {value!r}")
        return "append" if op == "add" else op

    def summary(self) -> str:
        text = self.content or self.target
        return f"{self.op}: {' '.join(text.split())[:160]}"


class Pattern(_Reply):
    label: str
    count: int = 0
    description: str = ""


class AnalystPatch(_Reply):
    reasoning: str = ""
    edits: list[EditItem] = []


class AnalystReply(_Reply):
    batch_size: int = Field(default=0, ge=0)
    patterns: list[Pattern] = []
    patch: AnalystPatch
    appendix_notes: list[str] = []

    @field_validator("appendix_notes", mode="before")
    @classmethod
    def _notes(cls, value: Any) -> list[str]:
        """A list of strings, one string, or dicts carrying ``note`` / ``content``."""
        if value is None:
            return []
        items = [value] if isinstance(value, str | dict) else list(value)
        out: list[str] = []
        for item in items:
            text = item.get("note") or item.get("content") if isinstance(item, dict) else item
            if not isinstance(text, str):
                raise ValueError(f"not a note: {item!r}")
            if text.strip():
                out.append(text.strip())
        return out


class FullCandidate(_Reply):
    """A complete replacement skill (full-rewrite mode)."""

    title: str = ""
    change_summary: list[str] = []
    new_skill: str
    support_count: int = Field(default=1, ge=0)

    @field_validator("new_skill")
    @classmethod
    def _non_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("new_skill is blank")
        return value.rstrip() + "\n"

    def as_edit(self, source: SourceType) -> EditItem:
        """Carried through merging as a ``rewrite`` item whose content is the whole skill."""
        return EditItem(
            op="rewrite",
            target=self.title,
            content=self.new_skill,
            support_count=self.support_count,
            source_type=source,
        )


class FullPatch(_Reply):
    reasoning: str = ""
    skill_candidates: list[FullCandidate] = []


class AnalystFullReply(_Reply):
    batch_size: int = Field(default=0, ge=0)
    patterns: list[Pattern] = []
    patch: FullPatch


class MergeFullReply(_Reply):
    reasoning: str = ""
    skill_candidates: list[FullCandidate]


class MergeReply(_Reply):
    reasoning: str = ""
    edits: list[EditItem]


class RankReply(_Reply):
    reasoning: str = ""
    selected_indices: list[int]


class BudgetReply(_Reply):
    learning_rate: int
    reasoning: str = ""
    confidence: str = ""
    risk_notes: list[str] = []

    @field_validator("learning_rate", mode="before")
    @classmethod
    def _coerce(cls, value: Any) -> int:
        return coerce_edit_count(value)


def coerce_edit_count(value: Any) -> int:
    """An integer edit count from a model: ints as is, integral floats, the first integer in
    a string; negatives become 0; booleans and anything else are invalid."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not an edit count")
    if isinstance(value, int):
        return max(0, value)
    if isinstance(value, float) and value.is_integer():
        return max(0, int(value))
    if isinstance(value, str):
        match = re.search(r"-?\d+", value)
        if match:
            return max(0, int(match.group()))
    raise ValueError(f"not an edit count: {value!r}")


class RewriteReply(_Reply):
    reasoning: str = ""
    change_summary: list[str] = []
    new_skill: str

    @field_validator("new_skill")
    @classmethod
    def _non_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("new_skill is blank")
        return value.rstrip() + "\n"


class ConsolidateReply(_Reply):
    reasoning: str = ""
    appendix_notes: list[str]


class SlowUpdateReply(_Reply):
    reasoning: str = ""
    slow_update_content: str


class MetaSkillReply(_Reply):
    reasoning: str = ""
    meta_skill_content: str


_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a reply: a fenced block first, else the outermost ``{...}`` span."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)]
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    raise ReplyFormatError("no JSON object in the reply", raw=text)


M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidatedReply(Generic[T]):
    value: T
    raw: str
    attempts: int
    completions: tuple[Completion, ...]


def _validate(text: str, schema: type[M]) -> M:
    data = extract_json_object(text)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise ReplyFormatError(f"{where}: {first['msg']}", raw=text) from exc


async def ask_json(
    completer: Completer,
    *,
    prompt: str,
    schema: type[M],
    stage: str,
    timeout_s: float,
    max_output_tokens: int,
    metadata: dict[str, Any] | None = None,
) -> ValidatedReply[M]:
    """One optimizer call validated against ``schema``; on an invalid reply, one retry that
    quotes the problem back to the model. Raises :class:`ReplyFormatError` after two misses."""
    base = CompletionRequest(
        role=Role.OPTIMIZER,
        prompt=redact_text(prompt),
        stage=stage,
        timeout=timeout_s,
        max_output_tokens=max_output_tokens,
        json_mode=True,
        metadata=dict(metadata or {}),
    )
    first = await completer.complete(base)
    try:
        return ValidatedReply(
            value=_validate(first.text, schema), raw=first.text, attempts=1, completions=(first,)
        )
    except ReplyFormatError as exc:
        problem = str(exc)
    retry = CompletionRequest(
        role=Role.OPTIMIZER,
        messages=(
            Message(role="user", content=base.prompt),
            Message(role="assistant", content=redact_text(first.text)),
            Message(
                role="user",
                content=(
                    f"That reply could not be used ({problem}). Answer again with only the "
                    "JSON object in the requested shape."
                ),
            ),
        ),
        stage=stage,
        timeout=timeout_s,
        max_output_tokens=max_output_tokens,
        json_mode=True,
        sample_id=1,
        metadata=dict(metadata or {}),
    )
    second = await completer.complete(retry)
    return ValidatedReply(
        value=_validate(second.text, schema),
        raw=second.text,
        attempts=2,
        completions=(first, second),
    )
