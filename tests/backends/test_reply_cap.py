"""Reply size caps: reading stops at the cap and the call fails with that cause.

Issue 11 item 5: ten-megabyte replies made one night take 236 s and 2.1 GB. Every member
now reads at most a cap per reply, sized from the request's output budget unless the
member's ``max_reply_bytes`` says otherwise; over the cap is a retryable failed call of
class ``too_large``. HTTP members are exercised against the loopback fake server (with and
without a declared length), CLI members against fake executables.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from skillopt.backends.base import CompletionRequest, Role
from skillopt.backends.cli.common import CliKind, CliSpec
from skillopt.backends.cli.member import CliBackend
from skillopt.backends.http.member import build_http_member
from skillopt.backends.pool import BackendPool, BreakerPolicy, BreakerState, MemberSpec
from skillopt.backends.reply_cap import http_reply_cap
from skillopt.backends.retry import RetryPolicy
from skillopt.config import OpenAIChatMember, OpenAIResponsesMember
from skillopt.errors import RetryableBackendError
from skillopt_sleep.demo import prepare_demo
from skillopt_sleep.night.entry import run_night
from support.fake_cli import write_fake_cli
from support.fake_model_server import FakeModelServer, Reply, Request, child_server
from support.sleep_setup import http_config
from support.world_http import world_reply

TEN_MB = "lorem ipsum " * (10 * 1024 * 1024 // 12)
JUDGEMENT = 300  # output tokens a judge call asks for
CLI_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent-home"}


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as srv:
        yield srv


def judge_request() -> CompletionRequest:
    return CompletionRequest(role=Role.OPTIMIZER, prompt="grade this", max_output_tokens=JUDGEMENT)


def chat_member(server: FakeModelServer, **extra: object) -> object:
    cfg = OpenAIChatMember.model_validate(
        {"name": "m", "base_url": server.url("m"), "model": "x", **extra}
    )
    return build_http_member(cfg)


@pytest.mark.parametrize("flags", [(), ("--chunked",)], ids=["content_length", "chunked"])
async def test_http_reply_over_its_cap_fails_and_reading_stops(flags: tuple[str, ...]) -> None:
    with child_server("--reply-bytes", str(10 * 1024 * 1024), *flags) as base_url:
        cfg = OpenAIChatMember(name="m", base_url=base_url, model="x")
        member = build_http_member(cfg)
        tracemalloc.start()
        try:
            with pytest.raises(RetryableBackendError) as info:
                await member.complete(judge_request())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
            await member.aclose()
    assert info.value.error_class == "too_large"
    cap = http_reply_cap(JUDGEMENT)
    assert f"{cap:,}-byte cap" in info.value.cause and cap < 100_000
    assert peak < 2_000_000  # the 10 MB body was never held


async def test_a_normal_reply_and_a_larger_member_cap_pass(server: FakeModelServer) -> None:
    server.script("m", Reply(text="fine"), Reply(text=TEN_MB, chunked=True))
    member = chat_member(server, max_reply_bytes=32 * 1024 * 1024)
    try:
        assert (await member.complete(judge_request())).text == "fine"  # type: ignore[attr-defined]
        big = await member.complete(judge_request())  # type: ignore[attr-defined]
    finally:
        await member.aclose()  # type: ignore[attr-defined]
    assert len(big.text) == len(TEN_MB)


async def test_the_cap_grows_with_the_output_budget(server: FakeModelServer) -> None:
    text = "y" * 200_000
    server.script("m", Reply(text=text), Reply(text=text))
    member = chat_member(server)
    try:
        with pytest.raises(RetryableBackendError):
            await member.complete(judge_request())  # type: ignore[attr-defined]
        answer = CompletionRequest(role=Role.TARGET, prompt="answer", max_output_tokens=8192)
        assert (await member.complete(answer)).text == text  # type: ignore[attr-defined]
    finally:
        await member.aclose()  # type: ignore[attr-defined]


async def test_compressed_reply_is_refused(server: FakeModelServer) -> None:
    server.script("m", Reply(text="ok", content_encoding="gzip"))
    member = chat_member(server)
    try:
        with pytest.raises(RetryableBackendError) as info:
            await member.complete(judge_request())  # type: ignore[attr-defined]
    finally:
        await member.aclose()  # type: ignore[attr-defined]
    assert info.value.error_class == "too_large" and "gzip" in info.value.cause
    assert server.requests[0].headers.get("accept-encoding") == "identity"


async def test_over_cap_is_a_retried_failed_call_in_the_pool(server: FakeModelServer) -> None:
    server.script("r", Reply(text=TEN_MB, chunked=True), Reply(text="second try"))
    cfg = OpenAIResponsesMember(name="r", base_url=server.url("r"), model="x")
    member = build_http_member(cfg)
    pool = BackendPool(
        {Role.OPTIMIZER: [MemberSpec(backend=member)]},
        retry=RetryPolicy(max_attempts=2, base_delay=0, max_delay=0),
    )
    async with pool:
        done = await pool.complete(judge_request())
    assert done.text == "second try" and done.attempts == 2
    assert pool.accounting()["total"]["failures"] == {"too_large": 1}


def cli_member(tmp_path: Path, **fake: object) -> CliBackend:
    spec_kw = fake.pop("spec", {})
    cli = write_fake_cli(tmp_path / "bin", "codex", **fake)  # type: ignore[arg-type]
    spec = CliSpec(kind=CliKind.CODEX, name="c", executable=str(cli.path), **spec_kw)  # type: ignore[arg-type]
    return CliBackend(spec, environ=CLI_ENV, scratch_root=tmp_path / "scratch")


async def test_cli_output_cap_is_sized_per_call(tmp_path: Path) -> None:
    member = cli_member(tmp_path, huge_bytes=3 * 1024 * 1024, last_message="ANSWER")
    with pytest.raises(RetryableBackendError) as info:
        await member.complete(judge_request())
    assert info.value.error_class == "too_large"
    answer = CompletionRequest(role=Role.TARGET, prompt="answer", max_output_tokens=4096)
    assert (await member.complete(answer)).text == "ANSWER"


async def test_cli_last_message_file_is_read_no_further_than_the_cap(tmp_path: Path) -> None:
    member = cli_member(
        tmp_path, last_message="z" * (2 * 1024 * 1024), spec={"max_output_bytes": 1024 * 1024}
    )
    with pytest.raises(RetryableBackendError) as info:
        await member.complete(judge_request())
    assert info.value.error_class == "too_large"


@pytest.mark.slow
async def test_a_night_with_oversized_judge_replies_fails_there_with_the_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "test-key-not-secret")
    setup = prepare_demo(tmp_path)
    huge = Reply(text=json.dumps({"score": 1.0, "reason": "x" * 1_000_000}))

    def rule(request: Request) -> Reply | None:
        return huge if "# What a good answer does" in request.user_text else None

    with FakeModelServer(reply_fn=world_reply, rule=rule) as srv:
        outcome = await run_night(http_config(setup, srv), project=setup.project)
    assert outcome.exit_code == 1 and outcome.failed_stage == "rollouts"
    assert "too_large" in outcome.reason and "-byte cap" in outcome.reason
    assert outcome.spend["errors_by_class"] == {"too_large": outcome.spend["failures"]}


async def test_over_cap_replies_do_not_open_the_circuit(server: FakeModelServer) -> None:
    """One kind of request drawing huge replies must not shut the member for every call."""
    server.script("m", *[Reply(text=TEN_MB, chunked=True)] * 6)
    member = MemberSpec(backend=chat_member(server))  # type: ignore[arg-type]
    pool = BackendPool(
        {Role.OPTIMIZER: [member]},
        retry=RetryPolicy(max_attempts=1),
        breaker=BreakerPolicy(failure_threshold=2, cooldown=60.0),
    )
    async with pool:
        for _ in range(6):
            with pytest.raises(RetryableBackendError):
                await pool.complete(judge_request())
        assert pool.breaker_state("m") is BreakerState.CLOSED
        assert (await pool.complete(judge_request())).text.startswith("echo:")
