"""HTTP members (openai SDK) against the loopback fake server: routes, auth, errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import openai
import pytest

from skillopt.backends.base import CompletionRequest, Message, Role
from skillopt.backends.factory import build_member
from skillopt.backends.http.member import build_http_member, make_http_client
from skillopt.backends.pool import BackendPool
from skillopt.config import (
    AzureChatMember,
    AzureResponsesMember,
    OpenAIChatMember,
    OpenAIResponsesMember,
    PoolConfig,
    load_pool_config,
)
from skillopt.errors import ConfigError, RetryableBackendError
from support.fake_model_server import FakeModelServer, Reply

KEY = "sk-proj-abcdefghijklmnopqrstuvwxyz012345"
ENV = {"FAKE_KEY": KEY}
SECRET_IN_PROMPT = "use ghp_0123456789abcdefghijklmnopqrstuvwxyzAB to push"


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as srv:
        yield srv


def configs(server: FakeModelServer) -> list[Any]:
    azure_auth = {"method": "key", "api_key_env": "FAKE_KEY"}
    return [
        OpenAIChatMember(
            name="oc", base_url=server.url("oc"), model="gpt-x", api_key_env="FAKE_KEY"
        ),
        OpenAIResponsesMember(
            name="orr", base_url=server.url("orr"), model="gpt-y", api_key_env="FAKE_KEY"
        ),
        AzureChatMember.model_validate(
            {
                "name": "ac",
                "endpoint": server.azure_endpoint("ac"),
                "deployment": "dep-chat",
                "api_version": "2024-10-21",
                "auth": azure_auth,
            }
        ),
        AzureResponsesMember.model_validate(
            {
                "name": "ar",
                "endpoint": server.azure_endpoint("ar"),
                "deployment": "dep-resp",
                "api_version": "2025-04-01-preview",
                "auth": azure_auth,
            }
        ),
    ]


EXPECTED_ROUTE = {"oc": "chat", "orr": "responses", "ac": "azure_chat", "ar": "azure_responses"}


@pytest.mark.parametrize("index", range(4))
async def test_each_kind_reports_the_prompt_tokens_the_provider_cached(
    server: FakeModelServer, index: int
) -> None:
    """``prompt_tokens_details.cached_tokens`` (chat) and ``input_tokens_details`` (Responses)
    reach the completion's usage as the cached part of the prompt."""
    cfg = configs(server)[index]
    server.script(cfg.name, Reply(usage=(2048, 9), cached_tokens=1920))
    backend = build_http_member(cfg, environ=ENV)
    try:
        done = await backend.complete(CompletionRequest(role=Role.TARGET, prompt="hello"))
    finally:
        await backend.aclose()
    assert (done.usage.prompt_tokens, done.usage.cached_tokens) == (2048, 1920)


@pytest.mark.parametrize("index", range(4))
async def test_each_kind_speaks_its_route(server: FakeModelServer, index: int) -> None:
    cfg = configs(server)[index]
    server.script(cfg.name, Reply(usage=(21, 4)))
    backend = build_http_member(cfg, environ=ENV)
    try:
        request = CompletionRequest(
            role=Role.TARGET,
            system="be brief",
            messages=(Message(role="user", content=SECRET_IN_PROMPT),),
            max_output_tokens=77,
        )
        result = await backend.complete(request)
    finally:
        await backend.aclose()
    (seen,) = server.requests_for(cfg.name)
    assert seen.route == EXPECTED_ROUTE[cfg.name]
    assert result.usage.prompt_tokens == 21 and result.usage.completion_tokens == 4
    assert not result.usage.estimated and result.member == cfg.name
    # The key goes only in the auth header. (The prompt's secret is redacted by the stack
    # above the member: tests/backends/test_open_redaction.py.)
    assert KEY.encode() not in seen.raw_body
    if cfg.name.startswith("a"):
        assert seen.headers["api-key"] == KEY
        assert seen.query["api-version"] == [cfg.api_version]
    else:
        assert seen.headers["authorization"] == f"Bearer {KEY}"
    body = seen.body
    if seen.route.endswith("chat"):
        assert body["messages"][0] == {"role": "system", "content": "be brief"}
        assert body["max_completion_tokens"] == 77
    else:
        assert body["input"][0]["role"] == "system" and body["max_output_tokens"] == 77
    if cfg.name == "ac":
        assert seen.path.endswith("/openai/deployments/dep-chat/chat/completions")
    if cfg.name == "ar":
        assert body["model"] == "dep-resp"


async def test_sdk_does_not_retry_on_its_own(server: FakeModelServer) -> None:
    cfg = configs(server)[0]
    server.script("oc", Reply(status=503), Reply(status=429))
    backend = build_http_member(cfg, environ=ENV)
    try:
        for _ in range(2):
            with pytest.raises(RetryableBackendError):
                await backend.complete(CompletionRequest(role=Role.TARGET, prompt="x"))
    finally:
        await backend.aclose()
    assert server.total("oc") == 2


async def test_token_limit_param_and_json_mode(server: FakeModelServer) -> None:
    cfg = OpenAIChatMember(
        name="old", base_url=server.url("old"), model="m", token_limit_param="max_tokens"
    )
    backend = build_http_member(cfg, environ={})
    try:
        await backend.complete(
            CompletionRequest(role=Role.TARGET, prompt="x", json_mode=True, max_output_tokens=9)
        )
    finally:
        await backend.aclose()
    (seen,) = server.requests_for("old")
    assert seen.body["max_tokens"] == 9 and "max_completion_tokens" not in seen.body
    assert seen.body["response_format"] == {"type": "json_object"}
    assert seen.headers["authorization"] == "Bearer no-key-configured"


def test_missing_key_env_is_a_config_error_naming_the_key(server: FakeModelServer) -> None:
    with pytest.raises(ConfigError) as caught:
        build_http_member(configs(server)[0], environ={})
    assert caught.value.key == "members.oc.api_key_env" and "FAKE_KEY" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        build_http_member(configs(server)[2], environ={})
    assert caught.value.key == "members.ac.auth.api_key_env"


async def test_shared_client_is_the_sdks_httpx2_client() -> None:
    client = make_http_client(max_connections=24)
    try:
        assert isinstance(client, httpx2.AsyncClient)
        assert isinstance(client, openai.DefaultAsyncHttpxClient)
        assert type(client).__module__.startswith(("openai", "httpx2"))
        pool = client._transport._pool  # type: ignore[attr-defined]
        assert pool._max_connections == 24
    finally:
        await client.aclose()


def _pool_toml(server: FakeModelServer, tmp_path: Path) -> Path:
    text = f"""
[[members]]
kind = "openai"
name = "one"
base_url = "{server.url("one")}"
model = "m1"
api_key_env = "FAKE_KEY"
max_concurrency = 3

[[members]]
kind = "azure"
name = "two"
endpoint = "{server.azure_endpoint("two")}"
deployment = "d2"
auth = {{ method = "key", api_key_env = "FAKE_KEY" }}
max_concurrency = 5

[[members]]
kind = "mock"
name = "offline"

[roles]
target = ["one", "two"]
optimizer = ["offline"]

[retry]
base_delay = 0.01
"""
    path = tmp_path / "endpoints.toml"
    path.write_text(text)
    return path


async def test_pool_from_config_shares_one_http_client(
    server: FakeModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_KEY", KEY)
    cfg = load_pool_config(_pool_toml(server, tmp_path))
    server.script("one", Reply(status=503))
    pool = BackendPool.from_config(cfg)
    async with pool:
        assert pool.total_concurrency(Role.TARGET) == 8
        results = [
            await pool.complete(CompletionRequest(role=Role.TARGET, prompt=f"p{i}"))
            for i in range(4)
        ]
        opt = await pool.complete(
            CompletionRequest(role=Role.OPTIMIZER, prompt="reflect", stage="reflect")
        )
    assert {r.member for r in results} == {"one", "two"}
    assert opt.member == "offline"
    seen = server.requests_for("one") + server.requests_for("two")
    assert len(seen) == 5
    # Sequential calls to two members on one host went over one kept-alive connection:
    # both members use the one shared HTTP client.
    assert len({r.peer for r in seen}) == 1
    # Closing the pool closed the shared client and with it the connection.
    assert await anyio.to_thread.run_sync(server.wait_until, lambda s: s.open_connections == 0, 3.0)


async def test_members_built_alone_do_not_share_connections(server: FakeModelServer) -> None:
    first = build_http_member(configs(server)[0], environ=ENV)
    second = build_http_member(configs(server)[2], environ=ENV)
    try:
        for backend in (first, second, first, second):
            await backend.complete(CompletionRequest(role=Role.TARGET, prompt="x"))
    finally:
        await first.aclose()
        await second.aclose()
    peers = {r.peer for r in server.requests_for("oc") + server.requests_for("ac")}
    assert len(peers) == 2


async def test_from_config_extra_backends_replace_members(
    server: FakeModelServer, tmp_path: Path
) -> None:
    cfg = load_pool_config(_pool_toml(server, tmp_path), env_prefix=None)
    # No FAKE_KEY in the environment: members built from config would fail, replacements don't.
    replacement_one = build_http_member(configs(server)[0], environ=ENV)
    replacement_two = build_http_member(configs(server)[2], environ=ENV)
    async with BackendPool.from_config(
        cfg, extra_backends={"one": replacement_one, "two": replacement_two}
    ) as pool:
        result = await pool.complete(CompletionRequest(role=Role.TARGET, prompt="x"))
    assert result.member in {"oc", "ac"}


def test_factory_dispatches_every_kind(server: FakeModelServer) -> None:
    cfg = PoolConfig.model_validate(
        {
            "members": [
                {"kind": "mock", "name": "m"},
                {"kind": "claude", "name": "cl", "executable": "/nonexistent/claude"},
            ],
            "roles": {"target": ["m"], "optimizer": ["m"]},
        }
    )
    mock = build_member(cfg.members[0])
    assert mock.name == "m"
    # The CLI builder is reached (lazily imported) and refuses a missing executable.
    with pytest.raises(ConfigError, match="not found"):
        build_member(cfg.members[1])


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 3, "completion_tokens": 2}}, ("hi", 3, 2, "stop")),
        ({"choices": []}, ("", None, None, None)),
        ({"choices": [{"message": {"content": None}, "finish_reason": "length"}]},
         ("", None, None, "length")),
        ([1, 2], "malformed"),
        ({"choices": "nope"}, "malformed"),
        ({"choices": [{"message": "text"}]}, "malformed"),
        ({"choices": [{"message": {"content": 7}}]}, "malformed"),
    ],
)  # fmt: skip
async def test_a_chat_reply_is_read_from_its_json_and_a_wrong_shape_is_malformed(
    server: FakeModelServer, body: Any, expected: Any
) -> None:
    cfg = configs(server)[0]
    server.script("oc", Reply(raw=json.dumps(body).encode()))
    backend = build_http_member(cfg, environ=ENV)
    try:
        request = CompletionRequest(role=Role.TARGET, prompt="x")
        if expected == "malformed":
            with pytest.raises(RetryableBackendError) as caught:
                await backend.complete(request)
            assert caught.value.kind == "malformed"
            return
        done = await backend.complete(request)
    finally:
        await backend.aclose()
    text, prompt_tokens, completion_tokens, finish = expected
    assert done.text == text and done.raw == {"finish_reason": finish}
    if prompt_tokens is not None:
        assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (
            prompt_tokens,
            completion_tokens,
        )
        assert not done.usage.estimated
    else:
        assert done.usage.estimated
