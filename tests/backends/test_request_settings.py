"""Request settings per member and per role reach the request body (issue 15)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skillopt.backends.base import CompletionRequest, Role
from skillopt.backends.cache import ResponseCache
from skillopt.backends.http.request_settings import RequestSettings, request_signature
from skillopt.backends.pool import BackendPool, MemberSpec
from skillopt.config import PoolConfig, load_pool_config
from skillopt.errors import ConfigError
from support.fake_model_server import FakeModelServer

ENV = {"FAKE_KEY": "sk-proj-abcdefghijklmnopqrstuvwxyz012345"}
SETTINGS: dict[str, Any] = {
    "temperature": 0.2,
    "top_p": 0.9,
    "max_output_tokens": 300,
    "reasoning_effort": "low",
    "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
    "target": {
        "system_prompt": "You solve olympiad problems.",
        "temperature": 0.7,
        "extra_body": {"seed": 5},
    },
    "optimizer": {"temperature": 0.0},
}


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as srv:
        yield srv


def member(server: FakeModelServer, kind: str) -> dict[str, Any]:
    if kind.startswith("azure"):
        where = {"endpoint": server.azure_endpoint(kind), "deployment": "dep"}
        where["auth"] = {"method": "key", "api_key_env": "FAKE_KEY"}
    else:
        where = {"base_url": server.url(kind), "model": "m", "api_key_env": "FAKE_KEY"}
    return {"kind": kind, "name": kind, **where, "request": SETTINGS}


async def ask(server: FakeModelServer, kind: str) -> list[dict[str, Any]]:
    from skillopt.backends.http.member import build_http_member

    cfg = PoolConfig.model_validate(
        {"members": [member(server, kind)], "roles": {"target": [kind], "optimizer": [kind]}}
    )
    backend = build_http_member(cfg.members[0], environ=ENV)  # type: ignore[arg-type]
    spec = MemberSpec(backend=backend, max_concurrency=2, timeout=10.0)
    async with BackendPool({Role.TARGET: [spec], Role.OPTIMIZER: [spec]}) as pool:
        await pool.complete(
            CompletionRequest(
                role=Role.TARGET,
                system_intro="You answer short factual questions.",
                system="# Skill\nBe exact.",
                prompt="Q?",
                max_output_tokens=64,
            )
        )
        await pool.complete(CompletionRequest(role=Role.OPTIMIZER, system="Judge.", prompt="P"))
    return [r.body for r in server.requests_for(kind)]


@pytest.mark.parametrize("kind", ["openai", "azure"])
async def test_chat_members_send_the_roles_settings(server: FakeModelServer, kind: str) -> None:
    target, optimizer = await ask(server, kind)
    assert target["temperature"] == 0.7 and optimizer["temperature"] == 0.0
    for body in (target, optimizer):
        assert body["top_p"] == 0.9 and body["reasoning_effort"] == "low"
        assert body["max_completion_tokens"] == 300  # the member's cap, not the caller's 64
        assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert target["seed"] == 5 and "seed" not in optimizer
    # the target's system prompt replaces the default intro; the skill stays
    assert target["messages"][0] == {
        "role": "system",
        "content": "You solve olympiad problems.\n\n# Skill\nBe exact.",
    }
    assert optimizer["messages"][0] == {"role": "system", "content": "Judge."}


@pytest.mark.parametrize("kind", ["openai_responses", "azure_responses"])
async def test_responses_members_send_the_roles_settings(
    server: FakeModelServer, kind: str
) -> None:
    target, optimizer = await ask(server, kind)
    assert (target["temperature"], optimizer["temperature"]) == (0.7, 0.0)
    assert target["reasoning"] == {"effort": "low"} and target["max_output_tokens"] == 300
    assert target["chat_template_kwargs"] == {"enable_thinking": False}
    assert target["input"][0]["content"].startswith("You solve olympiad problems.")


async def test_without_settings_the_default_system_prompt_is_kept(
    server: FakeModelServer,
) -> None:
    from skillopt.backends.http.member import build_http_member

    cfg = PoolConfig.model_validate(
        {
            "members": [{**member(server, "openai"), "request": {}}],
            "roles": {"target": ["openai"], "optimizer": ["openai"]},
        }
    )
    backend = build_http_member(cfg.members[0], environ=ENV)  # type: ignore[arg-type]
    request = CompletionRequest(
        role=Role.TARGET, system_intro="Intro.", system="Skill.", prompt="Q"
    )
    await backend.complete(request)
    body = server.requests_for("openai")[0].body
    assert body["messages"][0]["content"] == "Intro.\n\nSkill."
    assert not {"temperature", "top_p", "reasoning_effort"} & set(body)
    await backend.aclose()


async def test_settings_are_part_of_the_cache_key(server: FakeModelServer) -> None:
    from skillopt.backends.http.member import build_http_member

    async def calls_with(settings: dict[str, Any], cache: ResponseCache) -> None:
        data = {**member(server, "openai"), "request": settings}
        cfg = PoolConfig.model_validate(
            {"members": [data], "roles": {"target": ["openai"], "optimizer": ["openai"]}}
        )
        backend = build_http_member(cfg.members[0], environ=ENV)  # type: ignore[arg-type]
        spec = MemberSpec(backend=backend, max_concurrency=2, timeout=10.0)
        async with BackendPool({Role.TARGET: [spec]}, cache=cache) as pool:
            await pool.complete(CompletionRequest(role=Role.TARGET, prompt="same"))

    cache = ResponseCache()
    await calls_with({"temperature": 0.1}, cache)
    await calls_with({"temperature": 0.1}, cache)  # same settings: a cache hit
    await calls_with({"temperature": 0.9}, cache)  # other settings: answered again
    await calls_with({"optimizer": {"temperature": 0.9}}, cache)  # not the target's: as none
    assert server.total("openai") == 3


def test_role_settings_override_the_members_and_bad_values_are_named(tmp_path: Path) -> None:
    settings = RequestSettings.model_validate(SETTINGS)
    target = settings.for_role(Role.TARGET)
    assert (target.temperature, target.top_p, target.max_output_tokens) == (0.7, 0.9, 300)
    assert target.extra_body == {"chat_template_kwargs": {"enable_thinking": False}, "seed": 5}
    assert request_signature(RequestSettings(), Role.TARGET) == ""
    assert request_signature(settings, Role.TARGET) != request_signature(settings, Role.OPTIMIZER)
    for bad, key in [
        ("temperature = 3", "request.temperature"),
        ("target = {top_p = 0}", "request.target.top_p"),
        ('reasoning_effort = "max"', "request.reasoning_effort"),
        ("stream = true", "request.stream"),
    ]:
        path = tmp_path / "pool.toml"
        path.write_text(
            '[[members]]\nkind = "openai"\nname = "m"\nmodel = "x"\n'
            f"[members.request]\n{bad}\n"
            '[roles]\ntarget = ["m"]\noptimizer = ["m"]\n'
        )
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load_pool_config(path, env_prefix=None)


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("claude", "`model` (the CLI's model flag)"),
        ("codex", "`extra_args`"),
        ("mock", "`options`"),
    ],
)
def test_a_request_table_on_a_cli_or_mock_member_is_refused_by_name(
    tmp_path: Path, kind: str, says: str
) -> None:
    path = tmp_path / "pool.toml"
    path.write_text(
        f'[[members]]\nkind = "{kind}"\nname = "m"\n'
        "[members.request]\ntemperature = 0.2\n"
        '[roles]\ntarget = ["m"]\noptimizer = ["m"]\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_pool_config(path, env_prefix=None)
    assert caught.value.key == "members.0.request"
    assert "go to HTTP members" in str(caught.value) and says in str(caught.value)
