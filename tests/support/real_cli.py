"""Where the genuine agent CLIs are (``make tools`` installs them into ``.tools/bin``)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from skillopt.backends.cli.common import CliKind, CliSpec
from skillopt.backends.cli.member import CliBackend
from support.fake_agent_server import FakeAgentServer, Script
from support.netns import private_network

KINDS = [CliKind.CODEX, CliKind.CLAUDE, CliKind.COPILOT]

TOOLS_BIN = Path(__file__).resolve().parents[2] / ".tools" / "bin"


def find_cli(name: str) -> str | None:
    """The CLI's executable: ``.tools/bin`` first, then ``PATH``; ``None`` when absent."""
    local = TOOLS_BIN / name
    if local.exists():
        return str(local)
    return shutil.which(name)


def installed(kind: CliKind) -> CliKind:
    """``kind``, or a skip saying what is missing to run it."""
    if find_cli(kind.value) is None:
        pytest.skip(f"{kind} CLI not installed (run `make tools`; needs npm)")
    if shutil.which("node") is None and kind is not CliKind.CLAUDE:
        pytest.skip(f"{kind} CLI needs node on PATH")
    return kind


@contextmanager
def loopback_server(script: Script | None = None) -> Iterator[FakeAgentServer]:
    """The fake model server, in a private network namespace where permitted."""
    with private_network() as (entered, why):
        if not entered:
            print(f"\nreal-CLI tests run in the current namespace (loopback-only config): {why}")
        with FakeAgentServer(script) as fake:
            yield fake


def make_member(
    kind: CliKind,
    server_url: str,
    homes: Path,
    *,
    max_concurrency: int = 2,
    timeout: float = 60,
    mark: str = "",
) -> CliBackend:
    """A member driving the genuine ``kind`` CLI against the fake server at ``server_url``,
    its home under ``homes`` (one per CLI, kept warm across a module's tests)."""
    executable = find_cli(kind.value)
    assert executable is not None
    home = homes / kind.value
    environ = {
        "PATH": f"{TOOLS_BIN}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home / "user"),
        "FAKE_LLM_KEY": "dummy-key",
        "LANG": "C.UTF-8",
    }
    spec = CliSpec(
        kind=kind,
        name=f"real-{kind}",
        executable=executable,
        model="fake-model",
        isolated_home=True,
        home_dir=home / "cli",
        provider_base_url=f"{server_url}/v1",
        provider_key_env="FAKE_LLM_KEY",
        timeout=timeout,
        max_concurrency=max_concurrency,
        extra_env=(("SKILLOPT_TEST_MARK", mark),) if mark else (),
    )
    return CliBackend(spec, environ=environ, scratch_root=homes / "scratch")
