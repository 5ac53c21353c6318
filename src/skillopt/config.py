"""Configuration models shared by both CLIs, and the one loader every module reuses.

``load_toml_model(path, Model, env_prefix=..., overrides=...)`` reads a TOML file, applies
environment overrides and explicit overrides (precedence: overrides > env > file >
defaults), validates with pydantic (``extra="forbid"`` everywhere) and turns every problem
into a :class:`skillopt.errors.ConfigError` naming the dotted key path and the reason.

Secrets are never stored here: a config names the *environment variable* that holds a key
(``api_key_env = "OPENAI_API_KEY"``), so :func:`redacted_dump` can put a config in a run
record as is. This module is the only place that reads the process environment for config.

Env overrides: ``{PREFIX}SECTION__KEY=value`` sets ``section.key`` (``__`` separates levels,
names are lower-cased, a numeric level indexes a list: ``{PREFIX}MEMBERS__0__MODEL``).
Values are parsed as TOML literals when they parse (``3``, ``true``, ``["a","b"]``),
otherwise taken as strings. Each kind of file has one prefix (:data:`OVERRIDE_PREFIXES`);
a problem with an override names the variable, and a ``SKILLOPT_...__...`` variable this
file does not read is reported (logged as a warning), with the right name when there is one.
"""

from __future__ import annotations

import copy
import datetime
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from skillopt.backends.http.request_settings import RequestSettings
from skillopt.errors import ConfigError
from skillopt.redact import redact_obj

__all__ = [
    "AZURE_SCOPE",
    "CLI_KINDS",
    "HANDOFF_MEMBER",
    "HTTP_KINDS",
    "OVERRIDE_PREFIXES",
    "POOL_ENV_PREFIX",
    "AzureAuth",
    "AzureChatMember",
    "AzureCliAuth",
    "AzureDefaultAuth",
    "AzureKeyAuth",
    "AzureManagedIdentityAuth",
    "AzureResponsesMember",
    "BreakerConfig",
    "CacheConfig",
    "ClaudeCliMember",
    "CodexCliMember",
    "CopilotCliMember",
    "HandoffMember",
    "MemberConfig",
    "MockMember",
    "OpenAIChatMember",
    "OpenAIResponsesMember",
    "PoolConfig",
    "RetryConfig",
    "RolesConfig",
    "StrictModel",
    "TokenLimitParam",
    "UserPath",
    "check_env_name",
    "check_url",
    "config_error",
    "load_pool_config",
    "load_toml_model",
    "read_secret_env",
    "redacted_dump",
]

M = TypeVar("M", bound=BaseModel)

#: A filesystem path with ``~`` expanded (config files are written by people).
UserPath = Annotated[Path, AfterValidator(lambda p: p.expanduser())]

#: The documented environment-override prefix of each kind of config file.
OVERRIDE_PREFIXES = {
    "SKILLOPT_SLEEP__": "sleep.toml",
    "SKILLOPT_POOL__": "an endpoints file",
}
POOL_ENV_PREFIX = "SKILLOPT_POOL__"

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MEMBER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class StrictModel(BaseModel):
    """Base for every config model: frozen, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def check_url(value: str) -> str:
    """Accept an absolute http(s) URL with a host; the error never echoes the value."""
    message = "must be an absolute http:// or https:// URL with a host"
    try:
        parts = urlsplit(value.strip())
        _ = parts.port  # raises on a port that is not a number in range
    except ValueError as exc:
        raise ValueError(message) from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(message)
    return value.strip()


def check_env_name(value: str) -> str:
    if not _ENV_NAME.match(value):
        raise ValueError(
            "must be the NAME of an environment variable (letters, digits, _), not a secret"
        )
    return value


# ----------------------------------------------------------------------------- members
class _MemberBase(StrictModel):
    name: str = Field(min_length=1, max_length=64)
    max_concurrency: int = Field(default=8, ge=1, le=4096)
    requests_per_minute: float | None = Field(default=None, gt=0)
    timeout: float = Field(default=120.0, gt=0, le=3600)
    # Bytes read of one reply (per captured stream for a CLI) before the call fails;
    # None: sized per call from the request's output budget (docs/endpoints.md).
    max_reply_bytes: int | None = Field(default=None, ge=1024)

    @field_validator("name")
    @classmethod
    def _name_shape(cls, value: str) -> str:
        if not _MEMBER_NAME.match(value):
            raise ValueError("use letters, digits, '.', '_' or '-'")
        return value


# How replies with a shape are asked for (skillopt.backends.http.structured): "auto" sends
# the JSON schema and learns a weaker format from the endpoint's first refusal.
StructuredOutputs = Literal["auto", "json_schema", "json_object", "prompt"]


class _OpenAIBase(_MemberBase):
    base_url: str = "https://api.openai.com/v1"
    api_key_env: str | None = None  # None: send no key (local servers)
    model: str = Field(min_length=1)
    request: RequestSettings = Field(default_factory=RequestSettings)  # per member and role
    structured_outputs: StructuredOutputs = "auto"

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value)

    @field_validator("api_key_env")
    @classmethod
    def _env(cls, value: str | None) -> str | None:
        return None if value is None else check_env_name(value)


TokenLimitParam = Literal["max_completion_tokens", "max_tokens"]


class OpenAIChatMember(_OpenAIBase):
    """An OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, LiteLLM ...).

    ``token_limit_param``: older OpenAI-compatible servers only know ``max_tokens``.
    """

    kind: Literal["openai"] = "openai"
    token_limit_param: TokenLimitParam = "max_completion_tokens"


class OpenAIResponsesMember(_OpenAIBase):
    """An OpenAI Responses API endpoint."""

    kind: Literal["openai_responses"] = "openai_responses"


class AzureKeyAuth(StrictModel):
    method: Literal["key"] = "key"
    api_key_env: str = "AZURE_OPENAI_API_KEY"

    @field_validator("api_key_env")
    @classmethod
    def _env(cls, value: str) -> str:
        return check_env_name(value)


class AzureDefaultAuth(StrictModel):
    """``DefaultAzureCredential``: env vars, workload identity, managed identity, az login ..."""

    method: Literal["default"]


class AzureCliAuth(StrictModel):
    """``AzureCliCredential``: the token of the local ``az login``."""

    method: Literal["azure_cli"]


class AzureManagedIdentityAuth(StrictModel):
    """``ManagedIdentityCredential``; ``client_id`` picks a user-assigned identity."""

    method: Literal["managed_identity"]
    client_id: str | None = None


AzureAuth = Annotated[
    AzureKeyAuth | AzureDefaultAuth | AzureCliAuth | AzureManagedIdentityAuth,
    Field(discriminator="method"),
]

AZURE_SCOPE = "https://cognitiveservices.azure.com/.default"


class _AzureBase(_MemberBase):
    endpoint: str
    deployment: str = Field(min_length=1)
    api_version: str = Field(default="2024-10-21", min_length=1)
    auth: AzureAuth = Field(default_factory=AzureKeyAuth)
    token_scope: str = AZURE_SCOPE
    # Seconds one call waits for an Entra ID token (the fetch itself goes on, shared).
    token_timeout: float = Field(default=30.0, gt=0, le=600)
    request: RequestSettings = Field(default_factory=RequestSettings)  # per member and role
    structured_outputs: StructuredOutputs = "auto"

    @field_validator("endpoint")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value)


class AzureChatMember(_AzureBase):
    """An Azure OpenAI chat-completions deployment."""

    kind: Literal["azure"] = "azure"
    token_limit_param: TokenLimitParam = "max_completion_tokens"


class AzureResponsesMember(_AzureBase):
    """An Azure OpenAI Responses API deployment."""

    kind: Literal["azure_responses"] = "azure_responses"


def _refuse_request(data: Any, why: str) -> Any:
    """A ``request`` table on a member that cannot send one: a clear error naming the key
    (rather than "unknown key") and what the member takes instead."""
    if isinstance(data, dict) and "request" in data:
        raise PydanticCustomError(
            "keyed", "{reason}", {"key": "request", "reason": f"request settings {why}"}
        )
    return data


class MockMember(_MemberBase):
    """The deterministic offline world model; its own settings live in ``options``."""

    kind: Literal["mock"] = "mock"
    model: str = "mock"
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _no_request(cls, data: Any) -> Any:
        return _refuse_request(data, "go to HTTP members; the mock model reads `options` only")


class HandoffMember(_MemberBase):
    """No model: prompts go to files the user's own agent answers (``[pool] kind =
    "handoff"``, :mod:`skillopt.backends.handoff`). ``dir`` is the project's handoff
    directory, set by the command that runs the night. ``wait`` > 0 is waiting mode
    (``once --handoff --wait``): a call waits for its answer file, giving up after ``wait``
    seconds in which no answer landed; its ``timeout`` is then set long by that command, as
    a call lasts until the user answers it."""

    kind: Literal["handoff"] = "handoff"
    model: str = "handoff"
    dir: UserPath | None = None
    resume: str = ""  # the command that resumes the night, as PROMPTS.md says it
    wait: float = Field(default=0.0, ge=0, le=7 * 86400)
    timeout: float = Field(default=120.0, gt=0)


class _CliBase(_MemberBase):
    executable: UserPath | None = None
    model: str | None = None
    isolated_home: bool = False
    home_dir: UserPath | None = None
    provider_base_url: str | None = None
    provider_key_env: str | None = None
    extra_args: list[str] = Field(default_factory=list)
    timeout: float = Field(default=240.0, gt=0, le=7200)

    @field_validator("provider_base_url")
    @classmethod
    def _purl(cls, value: str | None) -> str | None:
        return None if value is None else check_url(value)

    @field_validator("provider_key_env")
    @classmethod
    def _penv(cls, value: str | None) -> str | None:
        return None if value is None else check_env_name(value)

    @model_validator(mode="before")
    @classmethod
    def _no_request(cls, data: Any) -> Any:
        return _refuse_request(
            data,
            "go to HTTP members: an agent CLI takes its model from `model` (the CLI's model flag) "
            "and anything else its command line accepts from `extra_args`; its system prompt "
            "is its own, and the skill reaches it as a skill file",
        )


class ClaudeCliMember(_CliBase):
    kind: Literal["claude"] = "claude"


class CodexCliMember(_CliBase):
    kind: Literal["codex"] = "codex"


class CopilotCliMember(_CliBase):
    kind: Literal["copilot"] = "copilot"


MemberConfig = Annotated[
    OpenAIChatMember
    | OpenAIResponsesMember
    | AzureChatMember
    | AzureResponsesMember
    | MockMember
    | HandoffMember
    | ClaudeCliMember
    | CodexCliMember
    | CopilotCliMember,
    Field(discriminator="kind"),
]

HTTP_KINDS = frozenset({"openai", "openai_responses", "azure", "azure_responses"})
CLI_KINDS = frozenset({"claude", "codex", "copilot"})


# ----------------------------------------------------------------------------- pool
class RolesConfig(StrictModel):
    target: list[str] = Field(min_length=1)
    optimizer: list[str] = Field(min_length=1)


class RetryConfig(StrictModel):
    max_attempts: int = Field(default=4, ge=1, le=20)
    base_delay: float = Field(default=0.5, ge=0)
    max_delay: float = Field(default=20.0, ge=0)
    retry_after_cap: float = Field(default=60.0, ge=0)


class BreakerConfig(StrictModel):
    failure_threshold: int = Field(default=5, ge=1)
    cooldown: float = Field(default=30.0, ge=0)
    max_wait: float = Field(default=0.0, ge=0)  # wait for a recovery when all are open


class CacheConfig(StrictModel):
    enabled: bool = True
    dir: UserPath | None = None  # None: memory only
    max_entries: int = Field(default=100_000, ge=1)


HANDOFF_MEMBER = "handoff"


class PoolConfig(StrictModel):
    """Members, which of them serve each role, and the pool's policies.

    ``kind = "handoff"`` (and no members) is short for one handoff member serving both
    roles: no model is called (docs/handoff.md)."""

    members: list[MemberConfig] = Field(min_length=1)
    roles: RolesConfig
    retry: RetryConfig = Field(default_factory=RetryConfig)
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)

    @model_validator(mode="before")
    @classmethod
    def _handoff_kind(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "kind" not in data:
            return data
        data = dict(data)
        kind = data.pop("kind")
        if kind != "handoff":
            raise PydanticCustomError(
                "keyed", "{reason}", {"key": "kind", "reason": f"unknown pool kind {kind!r} "
                                      "(the one kind is 'handoff'; else list members)"},
            )  # fmt: skip
        if data.get("members"):
            raise PydanticCustomError(
                "keyed", "{reason}", {"key": "kind", "reason": "a handoff pool calls no model: "
                                      "remove [[pool.members]] or the kind"},
            )  # fmt: skip
        data["members"] = [{"kind": "handoff", "name": HANDOFF_MEMBER}]
        data["roles"] = {"target": [HANDOFF_MEMBER], "optimizer": [HANDOFF_MEMBER]}
        data.setdefault("cache", {"enabled": False})
        return data

    @property
    def handoff(self) -> bool:
        """True when a handoff member answers (no model is called)."""
        return any(m.kind == "handoff" for m in self.members)

    @model_validator(mode="after")
    def _cross_check(self) -> PoolConfig:
        seen: dict[str, int] = {}
        for index, member in enumerate(self.members):
            if member.name in seen:
                raise PydanticCustomError(
                    "keyed",
                    "{reason}",
                    {
                        "key": f"members.{index}.name",
                        "reason": f"duplicate member name {member.name!r}",
                    },
                )
            seen[member.name] = index
        for role in ("target", "optimizer"):
            for position, name in enumerate(getattr(self.roles, role)):
                if name not in seen:
                    raise PydanticCustomError(
                        "keyed",
                        "{reason}",
                        {
                            "key": f"roles.{role}.{position}",
                            "reason": f"unknown member {name!r} (known: {', '.join(seen)})",
                        },
                    )
        return self

    def member(self, name: str) -> MemberConfig:
        for member in self.members:
            if member.name == name:
                return member
        raise ConfigError(f"unknown member {name!r}", key="members")


# ----------------------------------------------------------------------------- loading
def load_toml_model(
    path: str | os.PathLike[str] | None,
    model_cls: type[M],
    *,
    env_prefix: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    env_aliases: Mapping[str, str] | None = None,
    override_sources: Mapping[str, str] | None = None,
) -> M:
    """Load ``model_cls`` from a TOML file (``None``: defaults only), env and overrides.

    ``overrides`` keys may be dotted (``{"schedule.hour": 3}``) or nested dicts; ``None``
    values are skipped so CLI flags that were not given can be passed straight through.
    ``environ`` defaults to ``os.environ`` (tests pass their own). ``env_aliases`` maps a
    prefix people write by mistake to the one this file reads (reported, not applied);
    ``override_sources`` names where a dotted override came from (e.g. ``--rounds``), so an
    error about it blames the flag and not the file.
    """
    source = str(path) if path is not None else None
    data: dict[str, Any] = {}
    origins: dict[str, str] = {}
    if path is not None:
        data = _read_toml(Path(path).expanduser())
    if env_prefix:
        env = os.environ if environ is None else environ
        for name, dotted, raw in _env_overrides(env, env_prefix):
            origins[dotted] = f"environment variable {name}"
            _set_dotted(data, dotted, _parse_env_value(raw), source=origins[dotted])
        _report_unread_env(env, env_prefix, env_aliases or {})
    for dotted, value in _flatten(overrides or {}):
        if value is not None:
            origins[dotted] = (override_sources or {}).get(dotted, "overrides")
            _set_dotted(data, dotted, value, source=origins[dotted])
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        raise config_error(exc, data, source, origins) from None


def load_pool_config(
    path: str | os.PathLike[str] | None,
    *,
    env_prefix: str | None = POOL_ENV_PREFIX,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> PoolConfig:
    """The endpoints file (see ``configs/endpoints.example.toml``)."""
    return load_toml_model(
        path, PoolConfig, env_prefix=env_prefix, overrides=overrides, environ=environ
    )


def read_secret_env(env_name: str, *, key: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of the env var a config names for a secret; ``key`` is the config key path.

    Missing or empty is a :class:`ConfigError` naming the variable, never showing values.
    """
    env = os.environ if environ is None else environ
    value = env.get(env_name, "")
    if not value.strip():
        raise ConfigError(f"environment variable {env_name} is not set or empty", key=key)
    return value


def redacted_dump(model: BaseModel) -> dict[str, Any]:
    """A JSON-able dict for run records; secret shapes (and URL credentials) redacted.

    Configs hold env-var *names*, never key values, so this is a safety net, not a filter.
    """
    dumped = redact_obj(model.model_dump(mode="json"))
    assert isinstance(dumped, dict)
    return dumped


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError("file not found", source=str(path)) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror}", source=str(path)) from exc
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError("file is not UTF-8 text", source=str(path)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", source=str(path)) from exc


def _env_overrides(environ: Mapping[str, str], prefix: str) -> list[tuple[str, str, str]]:
    """``(variable, dotted key, raw value)`` for every variable under ``prefix``."""
    upper = prefix.upper()
    found = []
    for name, value in environ.items():
        if name.upper().startswith(upper) and len(name) > len(prefix):
            path = name[len(prefix) :].lower().strip("_").split("__")
            if not all(path):
                raise ConfigError(
                    "empty level in the key path (two __ in a row?)",
                    source=f"environment variable {name}",
                )
            found.append((name, ".".join(path), value))
    return sorted(found, key=lambda item: item[1])


def _report_unread_env(environ: Mapping[str, str], prefix: str, aliases: Mapping[str, str]) -> None:
    """Warn about ``SKILLOPT_...__...`` variables this file does not read: a documented
    prefix of another file written for this one (``aliases``), or no known prefix at all."""
    from skillopt.logging import get_logger

    log = get_logger(__name__)
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith("SKILLOPT_") or "__" not in upper or upper.startswith(prefix):
            continue
        alias = next((a for a in aliases if upper.startswith(a)), None)
        if alias is not None:
            right = aliases[alias] + name[len(alias) :]
            log.warning(
                "config.env_not_read",
                variable=name,
                reason=f"this file reads {prefix} variables: set {right} instead",
            )
        elif not any(upper.startswith(known) for known in OVERRIDE_PREFIXES):
            known = ", ".join(f"{p} ({what})" for p, what in OVERRIDE_PREFIXES.items())
            log.warning(
                "config.env_not_read",
                variable=name,
                reason=f"no config file reads it; the override prefixes are {known}",
            )


def _parse_env_value(raw: str) -> Any:
    """A TOML literal (number, bool, array, inline table) when it is one, else the string.

    Dates and times stay strings: ``2024-10-21`` is an api_version, not a date.
    """
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
    if isinstance(value, datetime.date | datetime.time):
        return raw
    return value


def _flatten(values: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.extend(_flatten(value, dotted + "."))
        else:
            out.append((dotted, value))
    return out


def _set_dotted(data: dict[str, Any], dotted: str, value: Any, *, source: str) -> None:
    parts = dotted.split(".")
    node: Any = data
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        where = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError("no such list element", key=where, source=source)
            if last:
                node[int(part)] = copy.deepcopy(value)
                return
            node = node[int(part)]
            continue
        if not isinstance(node, dict):
            raise ConfigError("cannot set a key inside a non-table value", key=where, source=source)
        if last:
            node[part] = copy.deepcopy(value)
            return
        node = node.setdefault(part, {})


def _key_path(loc: tuple[int | str, ...], data: Any) -> str:
    """Dotted path of a pydantic error location, dropping discriminator tags."""
    parts: list[str] = []
    node = data
    for seg in loc:
        if isinstance(node, dict) and isinstance(seg, str) and seg not in node:
            tag = node.get("kind", node.get("method"))
            if seg == tag:
                continue  # a union tag pydantic inserted, not a key the user wrote
        parts.append(str(seg))
        if isinstance(node, dict):
            node = node.get(seg) if isinstance(seg, str) else None
        elif isinstance(node, list) and isinstance(seg, int) and 0 <= seg < len(node):
            node = node[seg]
        else:
            node = None
    return ".".join(parts)


def _reason(err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        return "unknown key"
    disc = str(ctx.get("discriminator", "kind")).strip("'")
    if kind == "union_tag_invalid":
        return f"unknown {disc} {ctx.get('tag')!r}; expected one of {ctx.get('expected_tags')}"
    if kind == "union_tag_not_found":
        return f"missing {disc}"
    message = str(err.get("msg", "invalid value"))
    return message.removeprefix("Value error, ")


def _origin(key: str, origins: Mapping[str, str], default: str | None) -> str | None:
    """Where the value at ``key`` came from: the override that set it (or a table above
    it), else the file."""
    parts = key.split(".")
    for depth in range(len(parts), 0, -1):
        found = origins.get(".".join(parts[:depth]))
        if found is not None:
            return found
    return default


def config_error(
    exc: ValidationError, data: Any, source: str | None, origins: Mapping[str, str]
) -> ConfigError:
    """One ConfigError for a validation failure of ``data``: the dotted key, a plain reason
    ("unknown key", not pydantic's wording), and where the value came from (``origins``:
    dotted key -> the flag or variable that set it; else ``source``, the file)."""
    problems: list[tuple[str, str]] = []
    for err in exc.errors(include_url=False, include_input=False):
        ctx = err.get("ctx") or {}
        key = _key_path(tuple(err["loc"]), data)
        if "key" in ctx:  # a cross-check names its key below the model it ran on
            key = ".".join(part for part in (key, str(ctx["key"])) if part)
        if err.get("type") == "union_tag_invalid" or err.get("type") == "union_tag_not_found":
            disc = str(ctx.get("discriminator", "kind")).strip("'")
            key = f"{key}.{disc}".lstrip(".")
        problems.append((key or "<root>", _reason(err)))
    first_key, first_reason = problems[0]
    message = first_reason
    if len(problems) > 1:
        message += "; also " + "; ".join(f"{k}: {r}" for k, r in problems[1:])
    return ConfigError(message, key=first_key, source=_origin(first_key, origins, source))
