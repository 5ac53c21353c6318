"""CLI members inside the BackendPool: role routing, failover on retryable CLI errors,
fail-fast on auth, and the member's last error kept for diagnostics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt.backends.base import CompletionRequest, Role
from skillopt.backends.cli.common import CliKind, CliSpec
from skillopt.backends.cli.member import CliBackend, attempt_with_tools
from skillopt.backends.pool import BackendPool, MemberSpec
from skillopt.backends.retry import RetryPolicy
from skillopt.errors import BackendAuthError
from support.fake_cli import FakeCli, write_fake_cli

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent-home"}
FAST = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.02)


def claude_ok(text: str) -> str:
    return json.dumps({"type": "result", "is_error": False, "result": text})


def claude_error(status: int, text: str) -> str:
    return json.dumps(
        {"type": "result", "is_error": True, "api_error_status": status, "result": text}
    )


def cli_member(fake: FakeCli, kind: CliKind, name: str) -> MemberSpec:
    backend = CliBackend(CliSpec(kind=kind, name=name, executable=str(fake.path)), environ=ENV)
    return MemberSpec(backend=backend, max_concurrency=2, timeout=30)


async def test_roles_route_to_their_cli_members(tmp_path: Path) -> None:
    target = write_fake_cli(tmp_path / "t", "claude", stdout=claude_ok("from target"))
    optimizer = write_fake_cli(
        tmp_path / "o",
        "copilot",
        stdout='{"type":"assistant.message","data":{"content":"from optimizer"}}\n',
    )
    pool = BackendPool(
        {
            Role.TARGET: [cli_member(target, CliKind.CLAUDE, "claude-target")],
            Role.OPTIMIZER: [cli_member(optimizer, CliKind.COPILOT, "copilot-opt")],
        },
        retry=FAST,
    )
    async with pool:
        attempt = await pool.complete(CompletionRequest(role=Role.TARGET, prompt="a"))
        reflect = await pool.complete(CompletionRequest(role=Role.OPTIMIZER, prompt="r"))
    assert (attempt.text, attempt.member) == ("from target", "claude-target")
    assert (reflect.text, reflect.member) == ("from optimizer", "copilot-opt")


async def test_retryable_cli_failure_fails_over_and_is_kept(tmp_path: Path) -> None:
    broken = write_fake_cli(
        tmp_path / "a", "claude", stdout=claude_error(500, "API Error: 500 overloaded"), exit_code=1
    )
    healthy = write_fake_cli(tmp_path / "b", "claude", stdout=claude_ok("answer"))
    first = cli_member(broken, CliKind.CLAUDE, "broken")
    pool = BackendPool(
        {Role.TARGET: [first, cli_member(healthy, CliKind.CLAUDE, "healthy")]}, retry=FAST
    )
    async with pool:
        outs = [
            await pool.complete(
                CompletionRequest(role=Role.TARGET, prompt=f"q{i}", use_cache=False)
            )
            for i in range(3)
        ]
    assert {o.text for o in outs} == {"answer"} and {o.member for o in outs} == {"healthy"}
    assert len(broken.calls()) >= 1
    assert isinstance(first.backend, CliBackend) and first.backend.last_error is not None
    assert "500" in first.backend.last_error.cause


async def test_cli_auth_failure_is_not_retried(tmp_path: Path) -> None:
    locked = write_fake_cli(
        tmp_path / "a", "claude", stdout="Not logged in · Please run /login\n", exit_code=1
    )
    other = write_fake_cli(tmp_path / "b", "claude", stdout=claude_ok("never used"))
    pool = BackendPool(
        {
            Role.TARGET: [
                cli_member(locked, CliKind.CLAUDE, "locked"),
                cli_member(other, CliKind.CLAUDE, "other"),
            ]
        },
        retry=FAST,
    )
    async with pool:
        with pytest.raises(BackendAuthError) as info:
            await pool.complete(CompletionRequest(role=Role.TARGET, prompt="q"))
    assert info.value.member == "locked"
    assert len(locked.calls()) == 1 and other.calls() == []


async def test_attempt_with_tools_through_the_pool(tmp_path: Path) -> None:
    codex_out = json.dumps(
        {"type": "item.completed", "item": {"type": "agent_message", "text": "ok"}}
    )
    agent = write_fake_cli(
        tmp_path / "a",
        "codex",
        stdout=codex_out + "\n",
        run_tools=[["lookup", "x"], ["search", "y"]],
    )
    pool = BackendPool({Role.TARGET: [cli_member(agent, CliKind.CODEX, "cx")]}, retry=FAST)
    async with pool:
        first = await attempt_with_tools(
            pool, "find", ["search", "lookup"], outputs={"search": "hit"}
        )
        again = await attempt_with_tools(pool, "find", ["search", "lookup"])
    assert first.tools_called == ("lookup", "search") and not first.cached
    assert again.tools_called == ("lookup", "search") and not again.cached
