"""JSON reply schemas of the optimizer prompts, and one validated call with a single retry.

Model replies are foreign input: unknown keys are ignored, but every field we use is typed
and checked, and each schema accepts the other shapes a model gives the same content in
(a bare list, ``{"edits": [...]}`` for ``{"patch": {"edits": [...]}}``). A reply that fails
twice raises :class:`ReplyFormatError` naming both problems; the caller decides the
documented fallback (merge -> concatenation, rank -> first k, ...).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from skillopt.backends.base import CompletionRequest, ReplySchema, Role
from skillopt.replies import ValidatedReply, ask_validated, parse_reply, reply_schema
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
    "analyst_shape",
    "ask_json",
    "coerce_edit_count",
    "fit_summaries",
]

M = TypeVar("M", bound=BaseModel)


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


def _lift(data: Any, key: str) -> Any:
    """A bare list stands for ``{key: [...]}``."""
    return {key: data} if isinstance(data, list) else data


def _nest_patch(data: Any, key: str) -> Any:
    """``{"patch": {key: [...]}}`` also arrives as a bare list, as ``{"patch": [...]}`` or
    with the patch's fields at the top level (``{"reasoning": ..., key: [...]}``)."""
    if isinstance(data, list):
        return {"patch": {key: data}}
    if not isinstance(data, dict):
        return data
    patch = data.get("patch")
    if isinstance(patch, list):
        return {**data, "patch": {key: patch}}
    if patch is None and key in data:
        rest = {k: v for k, v in data.items() if k not in (key, "reasoning")}
        return {**rest, "patch": {key: data[key], "reasoning": data.get("reasoning", "")}}
    return data


class SourceType(StrEnum):
    FAILURE = "failure"
    SUCCESS = "success"


# Bounds on a reply's strings and lists, in its JSON schema only: a member that enforces
# them (a grammar-constrained server: llama.cpp, vLLM, Ollama) ends a string or a list there,
# where a small model otherwise runs on until the token cap cuts the reply and everything
# after the cut with it (issue 31). A reply is read whatever its lengths; a member that
# refuses the bounds is asked without them (:mod:`skillopt.backends.http.structured`).
_SENTENCE = {"maxLength": 200}
_LABEL = {"maxLength": 60}
_RULE = {"maxLength": 400}  # an edit's target or content: a rule, or a line of the skill
_FEW = {"maxItems": 4}
_OPS = ("append", "insert_after", "replace", "delete", "rewrite")  # "add" is read as append


class EditItem(_Reply):
    op: str = Field(json_schema_extra={"enum": list(_OPS)})
    target: str = Field(default="", json_schema_extra=_RULE)
    content: str = Field(default="", json_schema_extra=_RULE)
    support_count: int = Field(default=1, ge=0)
    source_type: SourceType = SourceType.FAILURE
    merge_level: int = 0

    @field_validator("op")
    @classmethod
    def _known_op(cls, value: str) -> str:
        op = value.strip().lower()
        if op not in {*_OPS, "add"}:
            raise ValueError(f"unknown op {value!r}")
        return "append" if op == "add" else op

    def summary(self) -> str:
        """One line, whole: a rule cut short is a different rule (prompts bound the total
        with :func:`fit_summaries` instead)."""
        text = self.content or self.target
        return f"{self.op}: {' '.join(text.split())}"


def fit_summaries(edits: Sequence[EditItem], budget: int) -> list[str]:
    """Whole one-line summaries of ``edits`` in order while they fit in ``budget``
    characters; the ones that do not fit are left out whole (never cut mid-sentence) and
    counted in a last line."""
    out: list[str] = []
    used = 0
    for index, edit in enumerate(edits):
        line = edit.summary()
        if used + len(line) > budget:
            left = len(edits) - index
            out.append(f"({left} more left out to stay within {budget} characters)")
            break
        out.append(line)
        used += len(line)
    return out


class Pattern(_Reply):
    label: str = Field(json_schema_extra=_LABEL)
    count: int = 0
    description: str = Field(default="", json_schema_extra=_SENTENCE)


class AnalystPatch(_Reply):
    reasoning: str = Field(default="", json_schema_extra=_SENTENCE)
    edits: list[EditItem] = []


class AnalystReply(_Reply):
    """The patch comes first: what the step needs is written before the patterns (kept for
    the record) and the notes, so a grammar-bound reply spends its tokens on it first."""

    batch_size: int = Field(default=0, ge=0)
    patch: AnalystPatch
    patterns: list[Pattern] = Field(default=[], json_schema_extra=_FEW)
    appendix_notes: list[str] = Field(default=[], json_schema_extra=_FEW)

    @model_validator(mode="before")
    @classmethod
    def _shapes(cls, data: Any) -> Any:
        return _nest_patch(data, "edits")

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


@functools.cache
def analyst_shape(edit_budget: int) -> ReplySchema:
    """The analyst reply's schema, its bounded form holding at most ``edit_budget`` edits
    (what the prompt asks for): a small model that repeats an edit is stopped there, with
    room left in its token cap to close the reply."""
    shape = reply_schema(AnalystReply)
    bounded = copy.deepcopy(shape.bounded or shape.schema)
    bounded["$defs"]["AnalystPatch"]["properties"]["edits"]["maxItems"] = edit_budget
    return dataclasses.replace(shape, bounded=bounded)


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

    @model_validator(mode="before")
    @classmethod
    def _shapes(cls, data: Any) -> Any:
        return _nest_patch(data, "skill_candidates")


class MergeFullReply(_Reply):
    reasoning: str = ""
    skill_candidates: list[FullCandidate]

    @model_validator(mode="before")
    @classmethod
    def _shapes(cls, data: Any) -> Any:
        return _lift(data, "skill_candidates")


class MergeReply(_Reply):
    reasoning: str = ""
    edits: list[EditItem]

    @model_validator(mode="before")
    @classmethod
    def _shapes(cls, data: Any) -> Any:
        return _lift(data, "edits")


class RankReply(_Reply):
    reasoning: str = ""
    selected_indices: list[int]

    @model_validator(mode="before")
    @classmethod
    def _shapes(cls, data: Any) -> Any:
        return _lift(data, "selected_indices")


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

    @model_validator(mode="before")
    @classmethod
    def _shapes(cls, data: Any) -> Any:
        return _lift(data, "appendix_notes")


class SlowUpdateReply(_Reply):
    reasoning: str = ""
    slow_update_content: str


class MetaSkillReply(_Reply):
    reasoning: str = ""
    meta_skill_content: str


async def ask_json(
    completer: Completer,
    *,
    prompt: str,
    schema: type[M],
    stage: str,
    timeout_s: float,
    max_output_tokens: int,
    metadata: dict[str, Any] | None = None,
    shape: ReplySchema | None = None,
) -> ValidatedReply[M]:
    """One optimizer call validated against ``schema`` (asked for in ``shape``, by default
    ``schema``'s own); on an invalid reply, one retry that quotes the problem back to the
    model. Raises :class:`ReplyFormatError` after two misses."""
    request = CompletionRequest(
        role=Role.OPTIMIZER,
        prompt=prompt,
        stage=stage,
        timeout=timeout_s,
        max_output_tokens=max_output_tokens,
        json_mode=True,
        reply_schema=shape or reply_schema(schema),
        metadata=dict(metadata or {}),
    )
    return await ask_validated(completer.complete, request, lambda text: parse_reply(text, schema))
