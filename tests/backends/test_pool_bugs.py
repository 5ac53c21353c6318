"""A bug is not an outage: it is raised at once with its traceback, never retried.

Issue 11 item 13: ``openai_http.py`` and ``pool.py`` turned any foreign exception into a
retryable "unexpected" failure, so a ``TypeError`` in our own code was retried and
reported as an endpoint failure. Transport and protocol failures stay retryable.
"""

from __future__ import annotations

import io
import json

import pytest

from skillopt.backends.base import CompletionRequest, Role
from skillopt.backends.http.member import build_http_member
from skillopt.backends.pool import BackendPool, MemberSpec
from skillopt.backends.retry import RetryPolicy, classify_exception
from skillopt.config import OpenAIChatMember
from skillopt.errors import RetryableBackendError
from skillopt.logging import configure_logging
from support.fake_model_server import FakeModelServer, Reply

RETRY = RetryPolicy(max_attempts=4, base_delay=0.0, max_delay=0.0)


def http_pool(server: FakeModelServer, *names: str) -> BackendPool:
    members = [
        MemberSpec(
            backend=build_http_member(OpenAIChatMember(name=n, base_url=server.url(n), model="x"))
        )
        for n in names
    ]
    return BackendPool({Role.TARGET: members}, retry=RETRY)


async def test_a_programming_error_in_our_code_fails_fast_with_its_traceback() -> None:
    logs = io.StringIO()
    configure_logging(stream=logs, json=True, level="INFO")
    # Messages must be Message objects: a bare string makes the member's own code fail
    # (building the SDK's message list) before anything is sent.
    broken = CompletionRequest(
        role=Role.TARGET,
        messages=("a bare string",),  # type: ignore[arg-type]
    )
    with FakeModelServer() as server:
        async with http_pool(server, "m1", "m2") as pool:
            with pytest.raises(AttributeError):
                await pool.complete(broken)
            stats = pool.accounting()
        assert server.requests == []
    assert stats["total"]["attempts"] == 1 and stats["total"]["retries"] == 0
    assert stats["total"]["failures"] == {}
    assert stats["members"]["m1"]["breaker"] == "closed"
    events = [json.loads(line) for line in logs.getvalue().splitlines()]
    bug = next(e for e in events if e["event"] == "pool.member_bug")
    assert "Traceback" in bug["exception"] and "_messages" in bug["exception"]
    assert not any(e["event"] == "pool.retry" for e in events)


async def test_transport_and_protocol_failures_are_still_retried() -> None:
    with FakeModelServer() as server:
        server.script("m1", Reply(drop=True), Reply(malformed=True), Reply(status=503))
        async with http_pool(server, "m1") as pool:
            done = await pool.complete(CompletionRequest(role=Role.TARGET, prompt="hi"))
            failures = pool.accounting()["total"]["failures"]
    assert done.attempts == 4
    assert failures == {"connection": 1, "malformed": 1, "server": 1}


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (json.JSONDecodeError("Expecting value", "<html>", 0), "malformed"),
        (ConnectionResetError("reset by peer"), "connection"),
        (TimeoutError(), "timeout"),
        (TypeError("unsupported operand"), None),
        (KeyError("choices"), None),
        (ValueError("bad argument"), None),
        (AttributeError("'NoneType' object has no attribute 'text'"), None),
    ],
)
def test_only_transport_and_protocol_errors_are_classified(
    exc: BaseException, kind: str | None
) -> None:
    mapped = classify_exception(exc, member="m")
    if kind is None:
        assert mapped is None
    else:
        assert isinstance(mapped, RetryableBackendError) and mapped.error_class == kind
