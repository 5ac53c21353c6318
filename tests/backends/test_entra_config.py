"""An Entra ID credential that cannot be built is a config error; azure-identity's warnings
come out through our logging.

Issue 11 item 22: ``auth = { method = "default" }`` with ``AZURE_AUTHORITY_HOST=http://...``
made ``once --json`` print 18 frames ending in a ValueError, exit 1 and no JSON; and
azure-identity's warnings were plain text in the JSON log stream.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skillopt_sleep.demo import prepare_demo
from support.fake_model_server import Connection, FakeModelServer, Request
from support.sleep_setup import write_config


def azure_pool(endpoint: str, auth: str) -> str:
    return f"""
[[pool.members]]
kind = "azure"
name = "az"
endpoint = "{endpoint}"
deployment = "dep"
auth = {{ method = "{auth}" }}

[pool.roles]
target = ["az"]
optimizer = ["az"]

[pool.retry]
max_attempts = 1
"""


def once(tmp_path: Path, pool: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    setup = prepare_demo(tmp_path)
    config = write_config(setup, pool=pool)
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **env}
    argv = [sys.executable, "-m", "skillopt_sleep", "once", "--config", str(config),
            "--project", str(setup.project), "--json"]  # fmt: skip
    return subprocess.run(argv, capture_output=True, env=full_env, timeout=300, check=False)


@pytest.mark.slow
def test_a_credential_that_cannot_be_built_is_a_config_error(tmp_path: Path) -> None:
    done = once(
        tmp_path,
        azure_pool("https://example.invalid/", "default"),
        AZURE_AUTHORITY_HOST="http://login.example",
    )
    assert done.returncode == 2, done.stderr.decode(errors="replace")[-2000:]
    document = json.loads(done.stdout)  # exactly one JSON document
    assert document["ok"] is False and document["error"] == "ConfigError"
    assert document["message"].startswith("members.az.auth: ")
    assert "'default' Entra ID credential" in document["message"]
    assert "TLS protected (https)" in document["message"]
    assert b"Traceback" not in done.stderr


async def _refuse_identity(conn: Connection, request: Request) -> None:
    await conn.send_json(400, {"error": "invalid_request", "error_description": "no identity"})


@pytest.mark.slow
def test_azure_identity_warnings_are_json_log_events(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        server.add_route("msi", r"^(?P<prefix>)/msi/token$", _refuse_identity)
        done = once(
            tmp_path,
            azure_pool(server.azure_endpoint("az"), "managed_identity"),
            IDENTITY_ENDPOINT=f"{server.base}/msi/token",
            IDENTITY_HEADER="test-header",
        )
    assert done.returncode == 1
    events = [json.loads(line) for line in done.stderr.decode().splitlines() if line.strip()]
    azure = [e for e in events if str(e.get("logger", "")).startswith("azure.identity")]
    assert azure and all(e["level"] == "warning" for e in azure)
    assert any("get_token failed" in e["event"] for e in azure)
