"""JSON in model replies: find it, validate it against a schema, and ask once more if unusable.

Models wrap the JSON they are asked for in prose, in a fenced block, or answer with a bare
list where an object with one list field was asked for. :func:`json_values` finds every
top-level JSON value a reply holds (fenced blocks first); :func:`parse_reply` returns the
first that validates against a pydantic model or ``TypeAdapter``. Other shapes of the same
content are the schema's business: a ``mode="before"`` validator on the model reshapes them
(e.g. a bare list into ``{"tasks": [...]}``), so each schema states what it tolerates.

A reply cut short by its token cap (a small model runs on until the cap ends it) leaves its
outermost object or list open: it is read with the members (or elements) it finished, up to
the last one followed by a comma, and closed there; what the cap cut is left out, never
guessed at. A reply whose finished part lacks a required field is still unusable.

When nothing validates, the error names the real cause: the validation problem of the
candidate the model most plausibly meant (a fenced block, else the longest JSON value),
then a decoding problem, then "no JSON". :func:`ask_validated` makes a call, and on an
unusable reply one retry that quotes the problem back; the caller shapes the retry.

The same pydantic model is what a request asks for: :func:`reply_schema` derives the JSON
schema members send as structured outputs (one source of truth for the shape asked and the
shape accepted), in the strict form OpenAI-compatible servers take.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from pydantic import BaseModel, TypeAdapter, ValidationError

from skillopt.backends.base import (
    EARLIER_PROBLEM,
    Completion,
    CompletionRequest,
    Message,
    ReplySchema,
)
from skillopt.errors import ReplyFormatError
from skillopt.logging import get_logger

__all__ = [
    "MAX_FAILED_STARTS",
    "RetryBuilder",
    "ValidatedReply",
    "ask_validated",
    "conversation_retry",
    "extract_json_object",
    "json_values",
    "parse_reply",
    "reply_schema",
    "strict_schema",
]

#: Positions where a ``{`` or ``[`` failed to decode before the scan gives up: a reply full
#: of brackets that are not JSON must not cost quadratic time.
MAX_FAILED_STARTS = 64

_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_OPENER = re.compile(r"[\[{]")
_DECODER = json.JSONDecoder()
_TOO_DEEP = "JSON nested too deeply"

_log = get_logger(__name__)

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Candidate:
    value: Any
    fenced: bool
    size: int  # characters of JSON text
    cut: bool = False  # read from a reply cut short: the members it finished


@dataclass(slots=True)
class _Scan:
    candidates: list[_Candidate]
    decode_error: str  # the first decoding problem met, "" if none


def _scan(text: str) -> _Scan:
    found: list[_Candidate] = []
    first_error = ""
    for match in _FENCE.finditer(text):
        body = match.group(1).strip()
        try:
            found.append(_Candidate(json.loads(body), fenced=True, size=len(body)))
        except json.JSONDecodeError as exc:
            first_error = first_error or exc.msg
        except RecursionError:
            first_error = first_error or _TOO_DEEP
    pos, failures = 0, 0
    while failures <= MAX_FAILED_STARTS and (hit := _OPENER.search(text, pos)) is not None:
        try:
            value, end = _DECODER.raw_decode(text, hit.start())
        except (json.JSONDecodeError, RecursionError) as exc:
            first_error = first_error or getattr(exc, "msg", _TOO_DEEP)
            kept = _finished_part(text, hit.start()) if failures == 0 else None
            if kept is not None:  # the text ends inside this value: what it finished
                found.append(_Candidate(kept, fenced=False, size=len(text) - hit.start(), cut=True))
            failures += 1
            pos = hit.start() + 1
            continue
        if not any(c.fenced and c.value == value for c in found):
            found.append(_Candidate(value, fenced=False, size=end - hit.start()))
        pos = end
    return _Scan(found, first_error)


def _finished_part(text: str, start: int) -> Any:
    """The object or list opening at ``start`` when the text ends inside it (a reply cut
    short): its members (or elements) up to the last comma at its own level, closed. None
    when it closes (a malformed value, not a cut one) or finished nothing."""
    depth, in_string, escaped, last_comma = 0, False, False, -1
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth <= 0:
                return None
        elif ch == "," and depth == 1:
            last_comma = i
    if last_comma < 0:
        return None
    closer = "}" if text[start] == "{" else "]"
    try:
        return json.loads(text[start:last_comma] + closer)
    except (json.JSONDecodeError, RecursionError):
        return None


def json_values(text: str) -> list[Any]:
    """Every top-level JSON object or array in ``text``: fenced blocks first, then the
    values found scanning the text (a value is not searched for values inside it)."""
    return [c.value for c in _scan(text).candidates]


def extract_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in a reply (see :func:`json_values`)."""
    for value in json_values(text):
        if isinstance(value, dict):
            return value
    raise ReplyFormatError("no JSON object in the reply", raw=text)


def _problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(root)"
    return f"{where}: {first['msg']}"


# Keywords a strict structured-output schema does not take (or that only add tokens).
_DROPPED_KEYWORDS = frozenset({"default", "title", "description", "examples"})
_SCHEMA_NAME = re.compile(r"[^A-Za-z0-9_-]+")


def strict_schema(node: Any) -> Any:
    """``node`` (a pydantic JSON schema) in the strict form of structured outputs: every
    object closed (``additionalProperties: false``) and every property required, defaults
    and titles dropped. A property with a default must then be given; the model that
    validates the reply still accepts it left out (parsing stays lenient)."""
    if isinstance(node, list):
        return [strict_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYWORDS:
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            out[key] = {name: strict_schema(sub) for name, sub in value.items()}
        else:
            out[key] = strict_schema(value)
    if isinstance(out.get("properties"), dict):
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out


# Bounds a grammar-constrained server enforces but strict hosted APIs may refuse.
_BOUNDS = frozenset({"maxLength", "minLength", "maxItems", "minItems"})


def _unbounded(node: Any) -> Any:
    """``node`` without length bounds (the schema every member may be sent)."""
    if isinstance(node, list):
        return [_unbounded(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: ({k: _unbounded(v) for k, v in value.items()} if key in ("properties", "$defs")
              and isinstance(value, dict) else _unbounded(value))
        for key, value in node.items() if key not in _BOUNDS
    }  # fmt: skip


@functools.cache
def reply_schema(schema: type[BaseModel] | TypeAdapter[Any], name: str = "") -> ReplySchema:
    """The strict JSON schema of replies ``schema`` validates, named ``name`` (else after
    the model): what a request carries as its ``reply_schema``."""
    adapter = schema if isinstance(schema, TypeAdapter) else TypeAdapter(schema)
    raw = adapter.json_schema()
    label = name or str(raw.get("title") or "reply")
    label = _SCHEMA_NAME.sub("_", label).strip("_")[:64] or "reply"
    full = strict_schema(raw)
    schema = _unbounded(full)
    return ReplySchema(name=label, schema=schema, bounded=full if full != schema else None)


def _kept_keys(value: Any) -> str:
    if isinstance(value, dict):
        return ",".join(str(k) for k in value)
    return f"{len(value)} items" if isinstance(value, list) else type(value).__name__


@overload
def parse_reply(text: str, schema: type[M]) -> M: ...


@overload
def parse_reply(text: str, schema: TypeAdapter[T]) -> T: ...


def parse_reply(text: str, schema: type[BaseModel] | TypeAdapter[Any]) -> Any:
    """The first JSON value in ``text`` that validates against ``schema``; else a
    :class:`ReplyFormatError` naming the real cause (see the module docstring)."""
    scan = _scan(text)
    problems: list[tuple[_Candidate, str]] = []
    for candidate in scan.candidates:
        try:
            if isinstance(schema, TypeAdapter):
                value = schema.validate_python(candidate.value)
            else:
                value = schema.model_validate(candidate.value)
        except ValidationError as exc:
            problems.append((candidate, _problem(exc)))
            continue
        if candidate.cut:
            _log.info("reply_cut_short", kept=_kept_keys(candidate.value), chars=len(text))
        return value
    if problems:
        fenced = [p for p in problems if p[0].fenced]
        meant = fenced[0] if fenced else max(problems, key=lambda p: p[0].size)
        raise ReplyFormatError(meant[1], raw=text)
    if scan.decode_error:
        raise ReplyFormatError(f"invalid JSON: {scan.decode_error}", raw=text)
    raise ReplyFormatError("no JSON in the reply", raw=text)


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidatedReply(Generic[T]):
    value: T
    raw: str
    attempts: int
    completions: tuple[Completion, ...]


#: Builds the retry from the first request, its unusable reply and the problem found.
RetryBuilder = Callable[[CompletionRequest, Completion, str], CompletionRequest]


def conversation_retry(
    request: CompletionRequest, reply: Completion, problem: str
) -> CompletionRequest:
    """The retry as a conversation: the request, the unusable reply, what was wrong."""
    asked = request.messages or (Message(role="user", content=request.prompt),)
    return dataclasses.replace(
        request,
        prompt="",
        messages=(
            *asked,
            Message(role="assistant", content=reply.text),
            Message(
                role="user",
                content=(
                    f"That reply could not be used ({problem}). Answer again with only the "
                    "JSON object in the requested shape."
                ),
            ),
        ),
        sample_id=1,
    )


async def ask_validated(
    complete: Callable[[CompletionRequest], Awaitable[Completion]],
    request: CompletionRequest,
    parse: Callable[[str], T],
    *,
    retry: RetryBuilder = conversation_retry,
) -> ValidatedReply[T]:
    """One call whose reply ``parse`` accepts; on a :class:`ReplyFormatError`, one retry
    built by ``retry`` (its metadata naming the problem under ``EARLIER_PROBLEM``). After
    two misses raises :class:`ReplyFormatError` naming both problems (``problems`` holds
    them, ``raw`` the last reply). Call failures propagate."""
    first = await complete(request)
    try:
        return ValidatedReply(
            value=parse(first.text), raw=first.text, attempts=1, completions=(first,)
        )
    except ReplyFormatError as exc:
        problem = str(exc)
    again = retry(request, first, problem)
    again = dataclasses.replace(again, metadata={**again.metadata, EARLIER_PROBLEM: problem})
    second = await complete(again)
    try:
        value = parse(second.text)
    except ReplyFormatError as exc:
        again = str(exc)
        both = f"{problem} (twice)" if again == problem else f"{problem}; on retry: {again}"
        raise ReplyFormatError(both, raw=second.text, problems=(problem, again)) from exc
    return ValidatedReply(value=value, raw=second.text, attempts=2, completions=(first, second))
