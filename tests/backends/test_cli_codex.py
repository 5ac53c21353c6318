"""codex --json: a reconnect notice before a completed turn is not a failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt.backends.base import CompletionRequest, Role
from skillopt.backends.cli.common import CliKind, CliSpec
from skillopt.backends.cli.member import CliBackend
from skillopt.errors import RetryableBackendError
from support.fake_cli import write_fake_cli

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent-home"}
RECONNECT = "Reconnecting... 1/5 (stream disconnected before completion)"


def lines(*events: dict[str, object]) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


def member(tmp_path: Path, stdout: str, exit_code: int = 0) -> CliBackend:
    fake = write_fake_cli(tmp_path / "bin", "codex", stdout=stdout, exit_code=exit_code)
    spec = CliSpec(kind=CliKind.CODEX, name="codex-1", executable=str(fake.path))
    return CliBackend(spec, environ=ENV, scratch_root=tmp_path / "scratch")


def req() -> CompletionRequest:
    return CompletionRequest(role=Role.TARGET, prompt="What is 2+2?")


async def test_a_retry_notice_before_a_completed_turn_is_not_a_failure(tmp_path: Path) -> None:
    # codex's own retries (default with the user's login) print `error` events as they go
    stdout = lines(
        {"type": "thread.started", "thread_id": "t"},
        {"type": "turn.started"},
        {"type": "error", "message": RECONNECT},
        {"type": "item.completed", "item": {"id": "1", "type": "agent_message", "text": "4"}},
        {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 1}},
    )
    out = await member(tmp_path, stdout).complete(req())
    assert out.text == "4"


async def test_an_error_without_a_completed_turn_still_fails(tmp_path: Path) -> None:
    stdout = lines({"type": "turn.started"}, {"type": "error", "message": RECONNECT})
    with pytest.raises(RetryableBackendError) as info:
        await member(tmp_path, stdout).complete(req())
    assert "Reconnecting" in info.value.cause


async def test_a_failed_turn_fails_even_with_exit_zero(tmp_path: Path) -> None:
    stdout = lines(
        {"type": "error", "message": "stream disconnected before completion"},
        {"type": "turn.failed", "error": {"message": "stream disconnected before completion"}},
    )
    with pytest.raises(RetryableBackendError):
        await member(tmp_path, stdout).complete(req())
