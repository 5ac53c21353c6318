"""HTTP members through the openai SDK: chat completions and Responses, OpenAI and Azure.

Every client is built with ``max_retries=0`` (the pool is the only retry layer) on ONE
shared ``openai.DefaultAsyncHttpxClient`` whose connection limits are sized to the pool.
That is the SDK's own httpx2-based client; an ``httpx`` 0.28 ``AsyncClient`` costs several
times the CPU per call, so none is ever created here.

What is sent was redacted above this member, by the stack's
:class:`~skillopt.backends.wrappers.RedactingCompleter`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import httpx2

from skillopt.backends.base import Completion, CompletionRequest, Role, Usage
from skillopt.backends.http.cap import REQUEST_HEADERS, cap_response, reply_cap
from skillopt.backends.http.entra import EntraTokenProvider, make_credential
from skillopt.backends.http.openai_import import import_openai
from skillopt.backends.http.request_settings import (
    RequestFields,
    RequestSettings,
    request_signature,
)
from skillopt.backends.http.structured import (
    FormatLevel,
    StructuredFormats,
    chat_format,
    responses_format,
)
from skillopt.backends.http.transport import SocketKeepingTransport
from skillopt.backends.reply_cap import http_reply_cap
from skillopt.backends.retry import classify_exception, short_cause
from skillopt.config import (
    AzureChatMember,
    AzureKeyAuth,
    AzureResponsesMember,
    OpenAIChatMember,
    OpenAIResponsesMember,
    read_secret_env,
)
from skillopt.errors import (
    BackendAuthError,
    BackendError,
    ContentFilterError,
    RetryableBackendError,
)

__all__ = ["Api", "HttpMemberConfig", "OpenAIHttpBackend", "build_http_member", "make_http_client"]

if TYPE_CHECKING:
    import openai
else:
    openai = import_openai()  # without the type packages chat calls never use

Api = Literal["chat", "responses"]
HttpMemberConfig = OpenAIChatMember | OpenAIResponsesMember | AzureChatMember | AzureResponsesMember

_NO_KEY = "no-key-configured"  # OpenAI-compatible servers that want no key still need a value


def make_http_client(*, max_connections: int, timeout: float = 600.0) -> httpx2.AsyncClient:
    """The one shared HTTP client for all HTTP members of a pool (replies read up to the
    calling member's cap, :mod:`skillopt.backends.http.cap`)."""
    size = max(1, max_connections)
    limits = httpx2.Limits(max_connections=size, max_keepalive_connections=size)
    return openai.DefaultAsyncHttpxClient(
        transport=SocketKeepingTransport(limits=limits),
        limits=limits,
        timeout=httpx2.Timeout(timeout, connect=min(timeout, 30.0)),
        headers=REQUEST_HEADERS,
        event_hooks={"request": [], "response": [cap_response]},
    )


class OpenAIHttpBackend:
    """One HTTP member: an SDK client, the model or deployment name, and which API to call."""

    def __init__(
        self,
        *,
        name: str,
        model: str,
        client: openai.AsyncOpenAI,
        api: Api,
        token_limit_param: str = "max_completion_tokens",
        token_provider: EntraTokenProvider | None = None,
        owned_http_client: httpx2.AsyncClient | None = None,
        max_reply_bytes: int | None = None,
        settings: RequestSettings | None = None,
        formats: StructuredFormats | None = None,
    ) -> None:
        self._formats = formats or StructuredFormats(endpoint=name, model=model)
        self._settings = settings or RequestSettings()
        # What each role sends, merged once (the settings are frozen; merging is pydantic work).
        self._fields = {role: self._settings.for_role(role) for role in Role}
        self._max_reply_bytes = max_reply_bytes
        self._owned_http_client = owned_http_client
        self._name = name
        self._model = model
        self._client = client
        self._api = api
        self._token_limit_param = token_limit_param
        self._token_provider = token_provider

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return self._model

    def request_signature(self, role: Role) -> str:
        """The settings ``role``'s calls send, for the response cache key."""
        return request_signature(self._settings, role)

    async def complete(self, request: CompletionRequest) -> Completion:
        started = time.monotonic()
        fields = self._fields[request.role]
        limit = fields.max_output_tokens or request.max_output_tokens
        cap = http_reply_cap(limit, self._max_reply_bytes)
        level = self._formats.level(request)
        try:
            with reply_cap(cap):
                if self._api == "chat":
                    text, usage, raw = await self._chat(request, fields, limit, level)
                else:
                    text, usage, raw = await self._responses(request, fields, limit, level)
        except BackendError as exc:
            raise self._refused(level, exc) from exc
        except Exception as exc:
            mapped = self._map(exc)
            if mapped is None:
                raise  # a bug, not an outage: never retried, its traceback kept
            raise self._refused(level, mapped) from exc
        if usage is None:
            usage = Usage.estimate(request.text_for_key(), text)
        return Completion(
            text=text,
            usage=usage,
            member=self._name,
            latency=time.monotonic() - started,
            raw=raw,
        )

    def _refused(self, level: FormatLevel | None, error: BackendError) -> BackendError:
        """``error``, or the retryable error that asks again in a weaker reply format when
        the endpoint refused ``level`` (:mod:`.structured`)."""
        if level is None:
            return error
        return self._formats.rejected(level, error, member=self._name)

    def _map(self, exc: Exception) -> BackendError | None:
        try:
            from azure.core.exceptions import ClientAuthenticationError
        except ImportError:  # pragma: no cover - azure-identity is a dependency
            ClientAuthenticationError = ()  # type: ignore[assignment,misc]
        if isinstance(exc, ClientAuthenticationError):
            return BackendAuthError(
                "Entra ID token unavailable",
                member=self._name,
                cause=short_cause(getattr(exc, "message", None) or exc),
            )
        return classify_exception(exc, member=self._name)

    def _messages(self, request: CompletionRequest, fields: RequestFields) -> list[dict[str, str]]:
        messages = request.as_messages(fields.system_text(request))
        return [{"role": m.role, "content": m.content} for m in messages]

    def _timeout(self, request: CompletionRequest) -> float | openai.NotGiven:
        return request.timeout if request.timeout is not None else openai.NOT_GIVEN

    async def _chat(
        self,
        request: CompletionRequest,
        fields: RequestFields,
        limit: int,
        level: FormatLevel | None,
    ) -> tuple[str, Usage | None, dict[str, Any]]:
        """One chat completion through the SDK's client (auth, Azure deployment routing,
        status errors), posting our own body and reading the JSON reply as it is: the
        typed ``create`` would walk the body through its param transforms and build
        pydantic models of the reply, several times the CPU of everything else per call."""
        body: dict[str, Any] = {
            "model": self._model,
            "messages": self._messages(request, fields),
            self._token_limit_param: limit,
        }
        response_format = chat_format(level, request)
        if response_format is not None:
            body["response_format"] = response_format
        sampling = {"temperature": fields.temperature, "top_p": fields.top_p}
        body.update({k: v for k, v in sampling.items() if v is not None})
        if fields.reasoning_effort is not None:
            body["reasoning_effort"] = fields.reasoning_effort
        body.update(fields.extra_body)
        options: openai.RequestOptions = {}
        if request.timeout is not None:
            options["timeout"] = request.timeout
        data = await self._client.post(
            "/chat/completions",
            cast_to=object,
            body=body,
            options=options,
        )
        _require_json(data, self._name)  # the SDK hands back text that is not JSON
        return _chat_reply(data, self._name)

    async def _responses(
        self,
        request: CompletionRequest,
        fields: RequestFields,
        limit: int,
        level: FormatLevel | None,
    ) -> tuple[str, Usage | None, dict[str, Any]]:
        extra: dict[str, Any] = {}
        text_format = responses_format(level, request)
        if text_format is not None:
            extra["text"] = {"format": text_format}
        sampling = {"temperature": fields.temperature, "top_p": fields.top_p}
        extra.update({k: v for k, v in sampling.items() if v is not None})
        if fields.reasoning_effort is not None:
            extra["reasoning"] = {"effort": fields.reasoning_effort}
        extra.update(fields.extra_body)
        resp = await self._client.responses.create(
            model=self._model,
            input=self._messages(request, fields),  # type: ignore[arg-type]
            max_output_tokens=limit,
            timeout=self._timeout(request),
            extra_body=extra or None,
        )
        _require_json(resp, self._name)
        usage = None
        if resp.usage is not None:
            details = getattr(resp.usage, "input_tokens_details", None)
            usage = Usage(
                prompt_tokens=resp.usage.input_tokens or 0,
                completion_tokens=resp.usage.output_tokens or 0,
                cached_tokens=_count(getattr(details, "cached_tokens", None)),
            )
        incomplete = getattr(resp, "incomplete_details", None)
        if incomplete is not None and getattr(incomplete, "reason", None) == "content_filter":
            raise ContentFilterError("content filtered", member=self._name, cause="incomplete")
        return resp.output_text or "", usage, {"status": resp.status}

    async def aclose(self) -> None:
        """Close what this member owns; a shared HTTP client is closed by its owner (the pool)."""
        if self._token_provider is not None:
            await self._token_provider.aclose()
        if self._owned_http_client is not None:
            await self._owned_http_client.aclose()


def _chat_reply(data: object, member: str) -> tuple[str, Usage | None, dict[str, Any]]:
    """Text, usage and finish reason of a chat completion's JSON body."""
    choices = data.get("choices") if isinstance(data, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else {}
    message = choice.get("message") if isinstance(choice, dict) else None
    content = (message.get("content") if isinstance(message, dict) else None) or ""
    raw_usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(choices, list | None):
        problem = "the body is not a chat completion"
    elif choices and (not isinstance(message, dict) or not isinstance(content, str)):
        problem = "the first choice holds no message text"
    elif raw_usage is not None and not isinstance(raw_usage, dict):
        problem = "usage is not an object"
    else:
        problem = ""
    if problem:
        raise RetryableBackendError(
            "malformed reply", kind="malformed", member=member, cause=short_cause(problem)
        )
    if not choices or not isinstance(choice, dict):
        return "", None, {"finish_reason": None}
    if choice.get("finish_reason") == "content_filter":
        raise ContentFilterError(
            "content filtered", member=member, status=200, cause="finish_reason"
        )
    usage = None
    if isinstance(raw_usage, dict):
        usage = Usage(
            prompt_tokens=_count(raw_usage.get("prompt_tokens")),
            completion_tokens=_count(raw_usage.get("completion_tokens")),
            cached_tokens=_cached(raw_usage),
        )
    return str(content), usage, {"finish_reason": choice.get("finish_reason")}


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _cached(usage: dict[str, Any]) -> int:
    """Prompt tokens served from the provider's prompt cache: OpenAI and Azure report
    ``prompt_tokens_details.cached_tokens``; Anthropic-compatible endpoints report
    ``cache_read_input_tokens``."""
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return cached or _count(usage.get("cache_read_input_tokens"))


def _require_json(resp: object, member: str) -> None:
    """The SDK hands back the body as text when it is not JSON (an HTML login page from a
    proxy, an empty body): a failed call that says what came back."""
    if not isinstance(resp, str):
        return
    head = resp.lstrip()[:512].lower()
    if not head:
        what = "an empty body"
    elif head.startswith(("<!doctype html", "<html")) or "<html" in head:
        what = "an HTML page"
    else:
        what = "a body that is not JSON"
    raise RetryableBackendError(
        f"the endpoint answered with {what}",
        kind="not_json",
        member=member,
        cause=short_cause(f"HTTP 200 with {what}, not JSON: {resp[:200]}"),
    )


def build_http_member(
    cfg: HttpMemberConfig,
    *,
    http_client: httpx2.AsyncClient | None = None,
    environ: Mapping[str, str] | None = None,
) -> OpenAIHttpBackend:
    """Build the SDK client for one member config (keys read from the named env vars)."""
    owned = (
        None if http_client is not None else make_http_client(max_connections=cfg.max_concurrency)
    )
    client_http = http_client or owned
    common: dict[str, Any] = {"max_retries": 0, "timeout": cfg.timeout, "http_client": client_http}
    key_path = f"members.{cfg.name}"
    if isinstance(cfg, OpenAIChatMember | OpenAIResponsesMember):
        api_key = (
            read_secret_env(cfg.api_key_env, key=f"{key_path}.api_key_env", environ=environ)
            if cfg.api_key_env
            else _NO_KEY
        )
        client = openai.AsyncOpenAI(base_url=cfg.base_url, api_key=api_key, **common)
        return OpenAIHttpBackend(
            name=cfg.name,
            model=cfg.model,
            client=client,
            api="chat" if isinstance(cfg, OpenAIChatMember) else "responses",
            token_limit_param=cfg.token_limit_param
            if isinstance(cfg, OpenAIChatMember)
            else "max_output_tokens",
            owned_http_client=owned,
            max_reply_bytes=cfg.max_reply_bytes,
            settings=cfg.request,
            formats=StructuredFormats(
                endpoint=cfg.base_url, model=cfg.model, setting=cfg.structured_outputs
            ),
        )
    provider: EntraTokenProvider | None = None
    auth_kw: dict[str, Any]
    if isinstance(cfg.auth, AzureKeyAuth):
        auth_kw = {
            "api_key": read_secret_env(
                cfg.auth.api_key_env, key=f"{key_path}.auth.api_key_env", environ=environ
            )
        }
    else:
        credential = make_credential(cfg.auth, key=f"{key_path}.auth")
        provider = EntraTokenProvider(credential, cfg.token_scope, timeout=cfg.token_timeout)
        token_fn: Callable[[], Awaitable[str]] = provider
        auth_kw = {"azure_ad_token_provider": token_fn}
    azure = openai.AsyncAzureOpenAI(
        azure_endpoint=cfg.endpoint, api_version=cfg.api_version, **auth_kw, **common
    )
    return OpenAIHttpBackend(
        name=cfg.name,
        model=cfg.deployment,
        client=azure,
        api="chat" if isinstance(cfg, AzureChatMember) else "responses",
        token_limit_param=cfg.token_limit_param
        if isinstance(cfg, AzureChatMember)
        else "max_output_tokens",
        token_provider=provider,
        owned_http_client=owned,
        max_reply_bytes=cfg.max_reply_bytes,
        settings=cfg.request,
        formats=StructuredFormats(
            endpoint=f"{cfg.endpoint}#{cfg.api_version}",
            model=cfg.deployment,
            setting=cfg.structured_outputs,
        ),
    )
