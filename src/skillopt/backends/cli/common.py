"""What every CLI member shares: its settings, the per-call plan, and failure classification.

Classification turns a CLI's exit code, reported HTTP status and error text into one of our
error types, so the pool decides about retries without knowing any CLI:

* retryable  (:class:`RetryableBackendError`): 429, 408, 409, 5xx, overload, connection failures,
  a stream cut short, an empty reply;
* auth       (:class:`BackendAuthError`): 401/403, "not logged in", a missing key variable;
* request    (:class:`BackendRequestError`): 400/404/422, unknown or unsupported model,
  a CLI too old for the model;
* other      (:class:`BackendError`): a non-zero exit we do not recognise.

The CLI's own text is kept (redacted) in the error's ``cause``; it is never returned as an answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from skillopt.backends.cli.process import ProcessResult
from skillopt.backends.reply_cap import CLI_UNSIZED_BYTES
from skillopt.config import read_secret_env
from skillopt.errors import (
    BackendAuthError,
    BackendError,
    BackendRequestError,
    ConfigError,
    RetryableBackendError,
)
from skillopt.redact import sanitize

__all__ = [
    "CallPlan",
    "CliFlavor",
    "CliKind",
    "CliSpec",
    "FailureClass",
    "ParsedReply",
    "class_of_status",
    "classify",
    "classify_text",
    "make_error",
    "output_cap",
    "parse_json_lines",
    "provider_key",
    "status_in_text",
]


class CliKind(StrEnum):
    CLAUDE = "claude"
    CODEX = "codex"
    COPILOT = "copilot"


class FailureClass(StrEnum):
    RETRYABLE = "retryable"
    AUTH = "auth"
    REQUEST = "request"
    OTHER = "other"


@dataclass(frozen=True, slots=True, kw_only=True)
class CliSpec:
    """One CLI member's settings (built from the pool's member config)."""

    kind: CliKind
    name: str
    executable: str  # resolved absolute path
    model: str = ""
    isolated_home: bool = False  # per-member CODEX_HOME / CLAUDE_CONFIG_DIR / COPILOT_HOME
    home_dir: Path | None = None  # where that home lives; a temp dir when None
    provider_base_url: str | None = None  # custom model provider (gateway, fake server)
    provider_key_env: str | None = None  # name of the env var holding its key
    extra_args: tuple[str, ...] = ()
    extra_env: tuple[tuple[str, str], ...] = ()
    timeout: float = 240.0
    max_concurrency: int = 2
    max_output_bytes: int | None = None  # the member's max_reply_bytes; None: sized per call


@dataclass(frozen=True, slots=True, kw_only=True)
class CallPlan:
    """One invocation: the prompt and where it runs."""

    prompt: str
    cwd: Path  # fresh temp dir per call (or the harness workspace)
    scratch: Path  # our own files for this call (last-message file, schema), outside cwd
    model: str = ""
    tools: tuple[str, ...] = ()  # shell tools the agent may run (tool-aware attempts)
    writable: bool = False  # the agent may modify files in cwd
    schema: dict[str, Any] | None = None  # JSON schema for a structured answer
    max_output_bytes: int | None = None  # cap per captured stream; None: the member's default


@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedReply:
    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0  # part of prompt_tokens served from the provider's prompt cache
    structured: dict[str, Any] | None = None
    extras: dict[str, Any] = field(default_factory=dict)


def output_cap(spec: CliSpec, plan: CallPlan) -> int:
    """Bytes read per captured stream (and result file) of this call: the plan's (sized
    from the request), else the member's ``max_reply_bytes``, else the harness default."""
    return plan.max_output_bytes or spec.max_output_bytes or CLI_UNSIZED_BYTES


_STATUS_IN_TEXT = re.compile(
    r"(?:status|API Error:|HTTP|error)\s*[:=]?\s*(\d{3})\b|\b(\d{3}) (?:Unauthorized|Forbidden|"
    r"Not Found|Too Many Requests|Internal Server Error|Bad Gateway|Service Unavailable)",
    re.IGNORECASE,
)

_AUTH_MARKERS = (
    "not logged in",
    "please run /login",
    "please log in",
    "login required",
    "invalid api key",
    "invalid_api_key",
    "failed to authenticate",
    "authentication failed",
    "authentication_error",
    "unauthorized",
    "token_expired",
    "token has expired",
    "missing environment variable",
    "no api key",
    "api key not found",
    "credentials",
)
_REQUEST_MARKERS = (
    "model_not_found",
    "unknown model",
    "unsupported model",
    "model is not supported",
    "is not supported when using",
    "not available for your account",
    "does not exist or you do not have access",
    "requires a newer version",
    "invalid_request_error",
    "unexpected argument",
    "unknown option",
    "error: unrecognized",
)
_RETRY_MARKERS = (
    "high demand",
    "overloaded",
    "rate limit",
    "rate_limit",
    "too many requests",
    "server-side issue",
    "server_error",
    "internal server error",
    "bad gateway",
    "service unavailable",
    "gateway timeout",
    "connection failed",
    "unable to connect",
    "could not connect",
    "connectionrefused",
    "econnrefused",
    "econnreset",
    "error sending request",
    "stream disconnected",
    "stream closed before",
    "timed out",
    "timeout",
    "network error",
    "transport_error",
)


def class_of_status(status: int) -> FailureClass:
    if status in (408, 409, 425, 429) or status >= 500:
        return FailureClass.RETRYABLE
    if status in (401, 403):
        return FailureClass.AUTH
    if 400 <= status < 500:
        return FailureClass.REQUEST
    return FailureClass.OTHER


def status_in_text(text: str) -> int | None:
    for match in _STATUS_IN_TEXT.finditer(text):
        value = int(match.group(1) or match.group(2))
        if 400 <= value <= 599:
            return value
    return None


def classify_text(text: str, status: int | None = None) -> FailureClass:
    """The failure class from a reported status, else from markers in the CLI's error text."""
    if status is not None and 400 <= status <= 599:
        return class_of_status(status)
    lowered = text.lower()
    found = status_in_text(text)
    if found is not None:
        return class_of_status(found)
    if any(m in lowered for m in _AUTH_MARKERS):
        return FailureClass.AUTH
    if any(m in lowered for m in _REQUEST_MARKERS):
        return FailureClass.REQUEST
    if any(m in lowered for m in _RETRY_MARKERS):
        return FailureClass.RETRYABLE
    return FailureClass.OTHER


def make_error(
    cls: FailureClass,
    *,
    spec: CliSpec,
    cause: str,
    status: int | None = None,
    kind: str | None = None,
) -> BackendError:
    """Build the typed error for a classified failure; ``cause`` is redacted here."""
    clean = sanitize(cause.strip())[-2000:] or "no error text"
    who = f"{spec.kind} CLI"
    if cls is FailureClass.RETRYABLE:
        label = kind or ("connection" if status is None else f"http_{status}")
        return RetryableBackendError(
            f"{who} failed (retryable)", kind=label, member=spec.name, status=status, cause=clean
        )
    if cls is FailureClass.AUTH:
        hint = {
            CliKind.CLAUDE: "run `claude` and log in, or set the provider key variable",
            CliKind.CODEX: "run `codex login`, or set the provider key variable",
            CliKind.COPILOT: "run `copilot` and /login, or set the provider key variable",
        }[spec.kind]
        return BackendAuthError(
            f"{who} is not authenticated: {hint}", member=spec.name, status=status, cause=clean
        )
    if cls is FailureClass.REQUEST:
        return BackendRequestError(
            f"{who} rejected the request (model {spec.model or 'default'!s})",
            member=spec.name,
            status=status,
            cause=clean,
        )
    return BackendError(f"{who} failed", member=spec.name, status=status, cause=clean)


def classify(
    text: str, *, spec: CliSpec, status: int | None = None, exit_code: int | None = None
) -> BackendError:
    """Classify and build in one step. A signal death (negative exit code) is retryable."""
    if status is None:
        status = status_in_text(text)
    cls = classify_text(text, status)
    if cls is FailureClass.OTHER and exit_code is not None and exit_code < 0:
        return make_error(
            FailureClass.RETRYABLE, spec=spec, cause=text, kind=f"signal_{-exit_code}"
        )
    return make_error(cls, spec=spec, cause=text, status=status)


def parse_json_lines(text: str) -> list[dict[str, Any]]:
    """Every stdout line that is a JSON object; other lines (banners, noise) are skipped."""
    events: list[dict[str, Any]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            events.append(value)
    return events


class CliFlavor(Protocol):
    """How one CLI is invoked and read. Implementations are stateless."""

    kind: CliKind
    home_env: str  # the variable that relocates its config/login directory
    prompt_on_stdin: bool

    def argv(self, spec: CliSpec, plan: CallPlan) -> list[str]: ...

    def env(
        self, spec: CliSpec, environ: Mapping[str, str], home: Path | None
    ) -> dict[str, str]: ...

    def keep(self, home: Path | None, environ: Mapping[str, str]) -> dict[str, Path]:
        """Login and settings a call's fresh home links to, from ``home`` (the member's
        isolated home) or, when None, the user's own CLI home (see ``cli/home.py``)."""
        ...

    def watcher(self, spec: CliSpec) -> Callable[[str], BackendError | None] | None: ...

    def parse(self, spec: CliSpec, plan: CallPlan, result: ProcessResult) -> ParsedReply: ...


def provider_key(spec: CliSpec, environ: Mapping[str, str]) -> str | None:
    """The custom provider's key from the variable the config names (None when none is named).

    A named variable that is unset or empty is an auth failure before anything is spawned.
    """
    if not spec.provider_key_env:
        return None
    try:
        return read_secret_env(spec.provider_key_env, key="provider_key_env", environ=environ)
    except ConfigError as exc:
        raise BackendAuthError(
            f"{spec.kind} CLI: set {spec.provider_key_env} to the provider's key",
            member=spec.name,
            cause=str(exc),
        ) from exc
