"""Structured outputs over HTTP: the strongest reply format an endpoint accepts, learned once.

A request whose reply has a shape (:attr:`CompletionRequest.reply_schema`) is sent with its
JSON schema (``response_format`` type ``json_schema``, strict), which OpenAI, Azure, vLLM,
llama.cpp and Ollama accept; a request that wants only JSON (``json_mode``) with type
``json_object``. A schema that bounds a string's length (``ReplySchema.bounded``) goes out
bounded first: a grammar-constrained server (llama.cpp, vLLM, Ollama) ends the string there,
where a small model would otherwise run on until its token cap cut the reply. An endpoint that
rejects the format (HTTP 400/422 naming it) is asked with the next weaker one: the bounded
schema -> the schema -> ``json_object`` -> the prompt alone. The downgrade is
learned from the first rejection and remembered for the process, per endpoint and model,
so each later request goes out in the format that works; a member's ``structured_outputs``
setting fixes the format instead (``auto`` learns).

The rejected request was sent and is paid for: the member raises a retryable error of kind
``format_unsupported`` with no delay, so the pool retries it (one retry layer, every
request counted) and the retry goes out in the weaker format.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from skillopt.backends.base import CompletionRequest
from skillopt.config import StructuredOutputs
from skillopt.errors import BackendError, RetryableBackendError
from skillopt.logging import get_logger

__all__ = [
    "FORMAT_REJECTED",
    "FormatLevel",
    "StructuredFormats",
    "chat_format",
    "forget_learned_formats",
    "responses_format",
]

_log = get_logger(__name__)

#: The error kind of a request the endpoint refused for its reply format.
FORMAT_REJECTED = "format_unsupported"

# What an endpoint says when it does not take a format: OpenAI names ``response_format``,
# vLLM and llama.cpp name ``json_schema`` or the schema, the Responses API names ``text.format``.
_MARKERS = ("response_format", "json_schema", "json_object", "text.format", "schema", "structured")


class FormatLevel(IntEnum):
    """How a reply's shape is asked for, strongest first."""

    BOUNDED_SCHEMA = 0  # the schema with its string length bounds (strict APIs may refuse them)
    JSON_SCHEMA = 1
    JSON_OBJECT = 2
    PROMPT = 3


_SETTING = {
    "json_schema": FormatLevel.JSON_SCHEMA,
    "json_object": FormatLevel.JSON_OBJECT,
    "prompt": FormatLevel.PROMPT,
}

# (endpoint, model) -> the strongest level the endpoint accepted not to reject: the process's
# memory (a daemon's nights and every pool of one process share it).
_learned: dict[tuple[str, str], FormatLevel] = {}


def forget_learned_formats() -> None:
    """Forget every downgrade learned in this process (tests; a reloaded config)."""
    _learned.clear()


class StructuredFormats:
    """One member's reply format: its setting, and what the process learned of its endpoint."""

    def __init__(self, *, endpoint: str, model: str, setting: StructuredOutputs = "auto") -> None:
        self._key = (endpoint, model)
        self._fixed = _SETTING.get(setting)

    def level(self, request: CompletionRequest) -> FormatLevel | None:
        """The format to ask ``request``'s reply in; None when it wants free text."""
        if request.reply_schema is None and not request.json_mode:
            return None
        schema = request.reply_schema
        wanted = (
            FormatLevel.JSON_OBJECT if schema is None
            else FormatLevel.JSON_SCHEMA if schema.bounded is None
            else FormatLevel.BOUNDED_SCHEMA
        )  # fmt: skip
        floor = self._fixed if self._fixed is not None else _learned.get(self._key, wanted)
        return max(wanted, floor)

    def rejected(self, level: FormatLevel, error: BackendError, *, member: str) -> BackendError:
        """The error to raise for a request asked in ``level`` that failed with ``error``:
        when the endpoint refused the format (and the setting lets the member learn), the
        next weaker level is remembered and a retryable ``format_unsupported`` error says
        to ask again at once; any other failure as it is."""
        if (
            self._fixed is not None
            or level is FormatLevel.PROMPT
            or error.status not in (400, 422)
            or not _names_format(error.cause)
        ):
            return error
        weaker = _weaker(level, error.cause)
        if _learned.get(self._key, FormatLevel.BOUNDED_SCHEMA) < weaker:
            _learned[self._key] = weaker
            _log.warning(
                "http.format_downgraded",
                member=member,
                refused=level.name.lower(),
                now=weaker.name.lower(),
                cause=error.cause,
            )
        return RetryableBackendError(
            f"the endpoint refused the reply format {level.name.lower()}",
            kind=FORMAT_REJECTED,
            member=member,
            status=error.status,
            cause=error.cause,
            retry_after=0.0,
        )


def _weaker(level: FormatLevel, cause: str) -> FormatLevel:
    """The level to ask in after ``level`` was refused for ``cause``: the bounded schema
    refused for its bounds is asked without them; refused for anything else, the schema
    alone would be too (it is the same schema), so ``json_object`` is next."""
    if level is FormatLevel.BOUNDED_SCHEMA and not any(
        bound in cause.lower() for bound in ("maxlength", "minlength")
    ):
        return FormatLevel.JSON_OBJECT
    return FormatLevel(level + 1)


def _names_format(cause: str) -> bool:
    lowered = cause.lower()
    return any(marker in lowered for marker in _MARKERS)


def _schema_at(level: FormatLevel | None, request: CompletionRequest) -> dict[str, Any] | None:
    """The JSON schema ``level`` sends for ``request`` (None: no schema at that level)."""
    shape = request.reply_schema
    if shape is None or level not in (FormatLevel.BOUNDED_SCHEMA, FormatLevel.JSON_SCHEMA):
        return None
    if level is FormatLevel.BOUNDED_SCHEMA and shape.bounded is not None:
        return shape.bounded
    return shape.schema


def chat_format(level: FormatLevel | None, request: CompletionRequest) -> dict[str, Any] | None:
    """The chat completions ``response_format`` for ``level`` (None: send none)."""
    schema = _schema_at(level, request)
    if schema is not None and request.reply_schema is not None:
        return {
            "type": "json_schema",
            "json_schema": {"name": request.reply_schema.name, "schema": schema, "strict": True},
        }
    if level is not None and level <= FormatLevel.JSON_OBJECT:
        return {"type": "json_object"}
    return None


def responses_format(
    level: FormatLevel | None, request: CompletionRequest
) -> dict[str, Any] | None:
    """The Responses API ``text.format`` for ``level`` (None: send none)."""
    schema = _schema_at(level, request)
    if schema is not None and request.reply_schema is not None:
        return {
            "type": "json_schema",
            "name": request.reply_schema.name,
            "schema": schema,
            "strict": True,
        }
    if level is not None and level <= FormatLevel.JSON_OBJECT:
        return {"type": "json_object"}
    return None
