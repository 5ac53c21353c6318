"""Retry policy, the pure delay function, and the classifier for failed model calls.

The pool is the only retry layer (SDK ``max_retries=0``). This module decides two things
about a failure: *what kind* it is (a :class:`skillopt.errors.BackendError` subclass) and
*how long to wait* before the next attempt. Both are pure so they can be tested by table.
"""

from __future__ import annotations

import email.utils
import json
import math
import random
import ssl
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skillopt.errors import (
    BackendAuthError,
    BackendError,
    BackendRequestError,
    BackendTimeoutError,
    ContentFilterError,
    QuotaExhaustedError,
    RetryableBackendError,
)
from skillopt.redact import sanitize

__all__ = [
    "RetryPolicy",
    "classify_exception",
    "classify_status",
    "parse_retry_after",
    "retry_delay",
    "short_cause",
]

_CAUSE_LIMIT = 300
_RETRYABLE_STATUS = frozenset({408, 409, 429})
_AUTH_STATUS = frozenset({401, 403})


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How often and how patiently the pool retries one call.

    ``max_attempts`` counts every attempt, across members. Without a server hint the
    delay before attempt ``n+1`` is uniform in ``[0, min(max_delay, base_delay * 2**(n-1))]``
    (full jitter). A ``Retry-After`` hint is obeyed up to ``retry_after_cap`` seconds.
    """

    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 20.0
    retry_after_cap: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if self.base_delay < 0 or self.max_delay < 0 or self.retry_after_cap < 0:
            raise ValueError("delays must be >= 0")


def retry_delay(
    policy: RetryPolicy, attempt: int, *, retry_after: float | None, rng: random.Random
) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based).

    A server hint (``retry_after``) wins, capped by ``policy.retry_after_cap``; otherwise
    capped exponential backoff with full jitter drawn from ``rng``.
    """
    if retry_after is not None and math.isfinite(retry_after) and retry_after >= 0:
        return min(retry_after, policy.retry_after_cap)
    exponent = max(0, attempt - 1)
    # Guard against float overflow for absurd attempt numbers.
    ceiling = policy.max_delay if exponent > 60 else policy.base_delay * (2.0**exponent)
    return rng.uniform(0.0, min(policy.max_delay, ceiling))


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Read ``retry-after-ms`` (milliseconds) or ``Retry-After`` (seconds or HTTP date).

    Returns seconds (>= 0) or ``None`` when there is no usable hint.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            ms = float(raw_ms)
        except ValueError:
            ms = math.nan
        if math.isfinite(ms) and ms >= 0:
            return ms / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if math.isfinite(seconds):
        return max(0.0, seconds)
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def short_cause(text: object) -> str:
    """A redacted, single-line, bounded description safe to log and persist."""
    flat = " ".join(str(text).split())
    clean = sanitize(flat)
    return clean if len(clean) <= _CAUSE_LIMIT else clean[: _CAUSE_LIMIT - 1] + "…"


def _is_content_filter(code: str | None, body: object) -> bool:
    if code and "content_filter" in code:
        return True
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            inner_code = inner.get("code")
            if isinstance(inner_code, str) and "content_filter" in inner_code:
                return True
            if inner.get("innererror") and "ResponsibleAIPolicyViolation" in str(inner):
                return True
    return False


def _is_quota_exhausted(code: str | None, body: object) -> bool:
    """OpenAI answers 429 ``insufficient_quota`` when the account is out of credit."""
    if code == "insufficient_quota":
        return True
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            return "insufficient_quota" in (inner.get("code"), inner.get("type"))
    return False


def classify_status(
    status: int,
    *,
    member: str,
    cause: str,
    retry_after: float | None = None,
    code: str | None = None,
    body: object = None,
) -> BackendError:
    """Map an HTTP status (plus provider error code) to our error type."""
    text = short_cause(cause)
    if _is_content_filter(code, body):
        return ContentFilterError("content filtered", member=member, status=status, cause=text)
    if status in _AUTH_STATUS:
        return BackendAuthError("not authorised", member=member, status=status, cause=text)
    if status == 429 and _is_quota_exhausted(code, body):
        return QuotaExhaustedError("quota exhausted", member=member, status=status, cause=text)
    if status == 429:
        return RetryableBackendError(
            "rate limited",
            kind="rate_limit",
            member=member,
            status=status,
            cause=text,
            retry_after=retry_after,
        )
    if status == 408:
        return BackendTimeoutError(
            "request timeout", member=member, status=status, cause=text, retry_after=retry_after
        )
    if status in _RETRYABLE_STATUS or status >= 500:
        return RetryableBackendError(
            "server error" if status >= 500 else "conflict",
            kind="server" if status >= 500 else "conflict",
            member=member,
            status=status,
            cause=text,
            retry_after=retry_after,
        )
    return BackendRequestError("request rejected", member=member, status=status, cause=text)


def classify_exception(exc: BaseException, *, member: str) -> BackendError | None:
    """Map a transport or protocol failure raised by the openai SDK or httpx2 to a
    :class:`BackendError`; ``None`` for anything else.

    Anything else (a ``TypeError`` in our code, a ``KeyError`` in a member) is a bug, not an
    outage: the caller re-raises it as it is, so it is never retried nor blamed on the
    endpoint. Imports of the foreign libraries are local so this module stays cheap to import.
    """
    if isinstance(exc, BackendError):
        return exc
    if "openai" in sys.modules:  # else no HTTP member was built: nothing here is the SDK's
        found = _classify_sdk(exc, member=member)
        if found is not None:
            return found
    if isinstance(exc, TimeoutError):
        return BackendTimeoutError(
            "timed out", member=member, cause=short_cause(type(exc).__name__)
        )
    if isinstance(exc, ConnectionError | ssl.SSLError):
        return _connection_failed(exc, member=member)
    if isinstance(exc, json.JSONDecodeError | UnicodeError):
        return _malformed(exc, member=member)
    return None


def _classify_sdk(exc: BaseException, *, member: str) -> BackendError | None:
    """The openai SDK's and httpx2's own failures (both are loaded when this runs)."""
    import httpx2
    import openai

    if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
        return BackendTimeoutError(
            "timed out", member=member, cause=short_cause(type(exc).__name__)
        )
    if isinstance(exc, openai.ContentFilterFinishReasonError):
        return ContentFilterError("content filtered", member=member, cause=short_cause(exc))
    if isinstance(exc, openai.APIStatusError):
        hint = parse_retry_after(dict(exc.response.headers))
        return classify_status(
            exc.status_code,
            member=member,
            cause=_status_message(exc),
            retry_after=hint,
            code=exc.code,
            body=exc.body,
        )
    if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
        return _connection_failed(exc, member=member)
    if isinstance(exc, openai.APIResponseValidationError):
        return _malformed(exc, member=member)
    if isinstance(exc, openai.OpenAIError):
        return BackendRequestError("client error", member=member, cause=short_cause(exc))
    return None


def _connection_failed(exc: BaseException, *, member: str) -> BackendError:
    """A connection that failed; kind ``refused`` when the endpoint refused it (nothing
    listens there: a stopped server), else ``connection``."""
    refused = _refused(exc)
    if refused is not None:
        return RetryableBackendError(
            "connection refused",
            kind="refused",
            member=member,
            cause=short_cause(f"connection refused: {refused}"),
        )
    reason = exc.__cause__ if exc.__cause__ is not None else exc
    return RetryableBackendError(
        "connection failed",
        kind="connection",
        member=member,
        cause=short_cause(f"{type(reason).__name__}: {reason}"),
    )


def _refused(exc: BaseException) -> ConnectionRefusedError | None:
    """The ``ECONNREFUSED`` somewhere in ``exc``'s chain (the SDKs wrap it several times)."""
    seen: BaseException | None = exc
    for _ in range(12):
        if seen is None:
            return None
        if isinstance(seen, ConnectionRefusedError):
            return seen
        seen = seen.__cause__ if seen.__cause__ is not None else seen.__context__
    return None


def _malformed(exc: BaseException, *, member: str) -> BackendError:
    """A 2xx reply whose body we could not parse: the server misbehaved; try again."""
    return RetryableBackendError(
        "malformed reply", kind="malformed", member=member, cause=short_cause(exc)
    )


def _status_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    return str(getattr(exc, "message", "") or exc)
