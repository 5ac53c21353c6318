"""A hung Entra ID token endpoint neither piles up threads nor outlives the night.

Issue 11 items 21: with managed identity and an identity endpoint that hangs, every token
fetch ran in a worker thread the member's timeout abandoned but the process still waited
for (a 90 s hang kept `once` alive 152 s after its night ended). The identity endpoint
here is App Service managed identity (``IDENTITY_ENDPOINT``) served by the loopback fake
server, hanging until the test releases it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from skillopt.backends.http.entra import EntraTokenProvider, make_credential
from skillopt.config import AZURE_SCOPE, AzureManagedIdentityAuth
from skillopt.errors import BackendTimeoutError
from skillopt_sleep.demo import prepare_demo
from support.fake_model_server import Connection, FakeModelServer, Request
from support.sleep_setup import write_config


class IdentityEndpoint:
    """An App Service managed-identity token route that answers only once released."""

    def __init__(self, server: FakeModelServer) -> None:
        self.release = threading.Event()
        self.server = server
        server.add_route("msi", r"^(?P<prefix>)/msi/token$", self._route)

    @property
    def url(self) -> str:
        return f"{self.server.base}/msi/token"

    def requests(self) -> int:
        return len([r for r in self.server.requests if r.route == "msi"])

    async def _route(self, conn: Connection, request: Request) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.release.wait)
        expires = str(int(time.time()) + 3600)
        await conn.send_json(200, {"access_token": "mi-token", "expires_on": expires,
                                   "resource": request.query["resource"][0],
                                   "token_type": "Bearer"})  # fmt: skip


@pytest.fixture
def identity(monkeypatch: pytest.MonkeyPatch) -> Iterator[IdentityEndpoint]:
    with FakeModelServer() as server:
        endpoint = IdentityEndpoint(server)
        monkeypatch.setenv("IDENTITY_ENDPOINT", endpoint.url)
        monkeypatch.setenv("IDENTITY_HEADER", "test-header")
        try:
            yield endpoint
        finally:
            endpoint.release.set()


def token_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "skillopt-entra-token"]


async def test_one_fetch_in_flight_shared_by_every_waiter(identity: IdentityEndpoint) -> None:
    earlier = set(token_threads())  # an earlier test's abandoned fetch may still be running
    credential = make_credential(AzureManagedIdentityAuth(method="managed_identity"))
    provider = EntraTokenProvider(credential, AZURE_SCOPE, timeout=0.2)
    timeouts = 0

    async def call() -> None:
        nonlocal timeouts
        try:
            await provider()
        except BackendTimeoutError:
            timeouts += 1

    for _ in range(3):  # three waves of callers while the endpoint hangs
        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(call)
    assert timeouts == 24
    assert provider.fetches == 1 and identity.requests() == 1
    started = [t for t in token_threads() if t not in earlier]
    assert len(started) == 1 and started[0].daemon
    identity.release.set()
    with anyio.fail_after(60):  # later calls wait on the same fetch until it lands
        while True:
            try:
                token = await provider()
                break
            except BackendTimeoutError:
                continue
    assert token == "mi-token" and provider.fetches == 1 and identity.requests() == 1
    assert await provider() == "mi-token"  # cached now


@pytest.mark.slow
def test_once_exits_after_its_night_while_the_identity_endpoint_hangs(
    identity: IdentityEndpoint, tmp_path: Path
) -> None:
    setup = prepare_demo(tmp_path)
    pool = f"""
[[pool.members]]
kind = "azure"
name = "az"
endpoint = "{identity.server.azure_endpoint("az")}"
deployment = "dep"
auth = {{ method = "managed_identity" }}
timeout = 2
max_concurrency = 8

[pool.roles]
target = ["az"]
optimizer = ["az"]

[pool.retry]
max_attempts = 2
base_delay = 0
max_delay = 0
"""
    # a lasting outage: the night fails instead of waiting out its patience
    config = write_config(setup, pool=pool, extra="[budget]\noutage_patience_seconds = 0\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-m", "skillopt_sleep", "once", "--config", str(config),
            "--project", str(setup.project), "--json"]  # fmt: skip
    # The endpoint hangs until the test ends; the process must not wait for it.
    done = subprocess.run(argv, capture_output=True, env=env, timeout=300, check=False)
    assert done.returncode == 1, done.stderr.decode(errors="replace")[-2000:]
    outcome = json.loads(done.stdout)
    assert outcome["failed_stage"] == "rollouts" and "timeout" in outcome["reason"]
    assert identity.requests() <= 2  # one fetch in flight at a time, not one per call
