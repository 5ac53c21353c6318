"""Azure Entra ID auth for real: a fake ``az`` on PATH driven through AzureCliCredential."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from skillopt.backends.base import CompletionRequest, Role
from skillopt.backends.http.entra import EntraTokenProvider, make_credential
from skillopt.backends.http.member import build_http_member
from skillopt.backends.pool import BackendPool, MemberSpec
from skillopt.backends.retry import RetryPolicy
from skillopt.config import (
    AzureChatMember,
    AzureDefaultAuth,
    AzureManagedIdentityAuth,
    AzureResponsesMember,
)
from skillopt.errors import BackendAuthError, BackendTimeoutError
from support.fake_model_server import FakeModelServer

FAKE_AZ = """#!{python}
import json, os, sys, time
log = os.environ["FAKE_AZ_LOG"]
with open(log, "a") as handle:
    handle.write(json.dumps(sys.argv[1:]) + "\\n")
mode = os.environ.get("FAKE_AZ_MODE", "ok")
if mode == "hang":
    with open(log + ".pid.part", "w") as handle:
        handle.write(str(os.getpid()))
    os.replace(log + ".pid.part", log + ".pid")
    time.sleep(600)
if mode == "fail":
    sys.stderr.write("ERROR: Please run 'az login' to setup account.\\n")
    sys.exit(1)
count = sum(1 for _ in open(log))
lifetime = float(os.environ.get("FAKE_AZ_LIFETIME", "3600"))
print(json.dumps({{
    "accessToken": f"entra-token-{{count}}",
    "expiresOn": "2099-01-01 00:00:00.000000",
    "expires_on": int(time.time() + lifetime),
    "subscription": "sub",
    "tenant": "tenant",
    "tokenType": "Bearer",
}}))
"""


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as srv:
        yield srv


@pytest.fixture
def fake_az(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "az"
    script.write_text(FAKE_AZ.format(python=sys.executable))
    script.chmod(0o755)
    log = tmp_path / "az.log"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_AZ_LOG", str(log))
    return log


def az_calls(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def cli_member(server: FakeModelServer, name: str, *, responses: bool = False) -> MemberSpec:
    data = {
        "name": name,
        "endpoint": server.azure_endpoint(name),
        "deployment": "dep",
        "auth": {"method": "azure_cli"},
    }
    cfg = (AzureResponsesMember if responses else AzureChatMember).model_validate(data)
    return MemberSpec(backend=build_http_member(cfg), max_concurrency=8, timeout=20)


@pytest.mark.parametrize("responses", [False, True])
async def test_azure_cli_token_is_sent_and_cached(
    server: FakeModelServer, fake_az: Path, responses: bool
) -> None:
    async with BackendPool({Role.TARGET: [cli_member(server, "az1", responses=responses)]}) as pool:
        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(pool.complete, CompletionRequest(role=Role.TARGET, prompt=f"q{i}"))
        await pool.complete(CompletionRequest(role=Role.TARGET, prompt="again"))
    seen = server.requests_for("az1")
    assert len(seen) == 7
    assert {r.headers["authorization"] for r in seen} == {"Bearer entra-token-1"}
    assert "api-key" not in seen[0].headers
    calls = az_calls(fake_az)
    assert len(calls) == 1  # one token for all seven calls, fetched once despite the burst
    assert calls[0][:2] == ["account", "get-access-token"]
    assert "https://cognitiveservices.azure.com" in calls[0]


async def test_token_near_expiry_is_refreshed(
    server: FakeModelServer, fake_az: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_AZ_LIFETIME", "60")  # inside the refresh margin
    async with BackendPool({Role.TARGET: [cli_member(server, "az2")]}) as pool:
        for i in range(2):
            await pool.complete(CompletionRequest(role=Role.TARGET, prompt=f"r{i}"))
    tokens = [r.headers["authorization"] for r in server.requests_for("az2")]
    assert tokens == ["Bearer entra-token-1", "Bearer entra-token-2"]
    assert len(az_calls(fake_az)) == 2


async def test_az_failure_is_a_fast_auth_error(
    server: FakeModelServer, fake_az: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_AZ_MODE", "fail")
    policy = RetryPolicy(max_attempts=3, base_delay=0.01)
    async with BackendPool({Role.TARGET: [cli_member(server, "az3")]}, retry=policy) as pool:
        with pytest.raises(BackendAuthError) as caught:
            await pool.complete(CompletionRequest(role=Role.TARGET, prompt="x"))
    assert caught.value.member == "az3"
    assert "az login" in caught.value.cause
    assert server.total("az3") == 0 and len(az_calls(fake_az)) == 1  # not retried


def test_entra_credentials_are_built_without_network() -> None:
    import azure.identity as identity

    mi = make_credential(AzureManagedIdentityAuth(method="managed_identity", client_id="abc-123"))
    assert isinstance(mi, identity.ManagedIdentityCredential)
    default = make_credential(AzureDefaultAuth(method="default"))
    assert isinstance(default, identity.DefaultAzureCredential)


async def test_a_hanging_token_fetch_times_out(
    fake_az: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import azure.identity as identity

    monkeypatch.setenv("FAKE_AZ_MODE", "hang")
    provider = EntraTokenProvider(
        identity.AzureCliCredential(process_timeout=600),
        "https://cognitiveservices.azure.com/.default",
        timeout=0.3,
    )
    # the 0.3 s deadline, not the credential's 600 s process timeout
    with anyio.fail_after(60), pytest.raises(BackendTimeoutError):
        await provider()
    hanging = anyio.Path(f"{fake_az}.pid")
    with anyio.fail_after(60):
        while not await hanging.exists():  # noqa: ASYNC110 (a file has no event to wait on)
            await anyio.sleep(0.01)
    os.kill(int(await hanging.read_text()), signal.SIGKILL)  # the fetch goes on in the background
