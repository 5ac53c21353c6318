"""The genuine agent CLIs (installed by ``make tools``) driven through our members.

Each CLI talks to :class:`FakeAgentServer` on 127.0.0.1 through its custom-provider settings.
Where permitted, the whole module runs in a private network namespace (only ``lo``), so nothing
can leave the machine. A CLI that is not installed is skipped with the reason shown by ``-ra``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from skillopt.backends.base import CompletionRequest, Role
from skillopt.backends.cli.common import CliKind
from skillopt.backends.harness.rollout import HarnessOptions, run_rollout
from skillopt.backends.harness.trace import AnswerFormat, ReadStatus
from skillopt.backends.harness.workspace import SkillFile, WorkspaceSpec
from skillopt.errors import BackendAuthError, RetryableBackendError
from support.fake_agent_server import FakeAgentServer, dead_port
from support.real_cli import KINDS, installed, loopback_server, make_member

pytestmark = pytest.mark.realcli


@pytest.fixture(scope="module")
def server() -> Iterator[FakeAgentServer]:
    with loopback_server() as fake:
        yield fake


@pytest.fixture(params=KINDS, ids=[k.value for k in KINDS])
def kind(request: pytest.FixtureRequest) -> CliKind:
    return installed(request.param)


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One home per CLI for the module: a warm home keeps calls near their start-up cost."""
    return tmp_path_factory.mktemp("cli-homes")


def req(prompt: str) -> CompletionRequest:
    return CompletionRequest(role=Role.TARGET, prompt=prompt)


def marked_pids(mark: str) -> list[int]:
    """Live processes whose environment carries ``SKILLOPT_TEST_MARK=mark``."""
    needle = f"SKILLOPT_TEST_MARK={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().split(") ", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


async def test_reply_arrives_intact(kind: CliKind, server: FakeAgentServer, homes: Path) -> None:
    member = make_member(kind, server.base_url, homes)
    mark = uuid.uuid4().hex
    out = await member.complete(req(f"Reply {mark}. FAKE_REPLY[ANSWER:6d995dba — ünïcode ✓]"))
    assert out.text.strip() == "ANSWER:6d995dba — ünïcode ✓"
    assert out.member == f"real-{kind}"
    (seen,) = [r for r in server.requests if mark in str(r.body)]
    names = {
        str(t.get("name") or t.get("function", {}).get("name"))
        for t in seen.body.get("tools") or []
    }
    if kind is CliKind.CLAUDE:  # a plain call offers the model no tools at all
        assert names == set()
    elif kind is CliKind.COPILOT:  # only read-only viewers, no shell
        assert names and names <= {"view", "grep", "glob"}


async def test_server_error_is_retryable_and_quick(
    kind: CliKind, server: FakeAgentServer, homes: Path
) -> None:
    member = make_member(kind, server.base_url, homes)
    started = time.monotonic()
    with pytest.raises(RetryableBackendError) as info:
        await member.complete(req("FAKE_ERROR:500"))
    assert time.monotonic() - started < 10
    assert info.value.member == f"real-{kind}"


async def test_unauthorized_is_an_auth_failure(
    kind: CliKind, server: FakeAgentServer, homes: Path
) -> None:
    member = make_member(kind, server.base_url, homes)
    with pytest.raises(BackendAuthError) as info:
        await member.complete(req("FAKE_ERROR:401"))
    assert "dummy-key" not in info.value.cause


async def test_dead_port_is_a_quick_connection_failure(
    kind: CliKind, server: FakeAgentServer, homes: Path
) -> None:
    member = make_member(kind, f"http://127.0.0.1:{dead_port()}", homes)
    started = time.monotonic()
    with pytest.raises(RetryableBackendError):
        await member.complete(req("hello"))
    assert time.monotonic() - started < 10


async def test_concurrent_calls_respect_the_member_limit(
    kind: CliKind, server: FakeAgentServer, homes: Path
) -> None:
    member = make_member(kind, server.base_url, homes, max_concurrency=2)
    server.reset()
    replies: list[str] = []

    async def one(i: int) -> None:
        out = await member.complete(req(f"FAKE_SLEEP:700 FAKE_REPLY[r{i}]"))
        replies.append(out.text.strip())

    async with anyio.create_task_group() as tg:
        for i in range(4):
            tg.start_soon(one, i)
    assert sorted(replies) == ["r0", "r1", "r2", "r3"]
    # never above the limit; whether two overlap at the server depends on CLI start-up times
    assert 1 <= server.max_in_flight <= 2


async def test_cancellation_kills_the_cli(
    kind: CliKind, server: FakeAgentServer, homes: Path
) -> None:
    mark = uuid.uuid4().hex
    member = make_member(kind, server.base_url, homes, mark=mark)
    server.reset()
    before = len(server.requests)
    async with anyio.create_task_group() as tg:
        tg.start_soon(member.complete, req(f"FAKE_HANG {mark}"))
        with anyio.fail_after(60):  # wait until the CLI's request is hanging in the server
            while not any(mark in str(r.body) for r in server.requests[before:]):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        assert marked_pids(mark), "the CLI should be running while its request hangs"
        tg.cancel_scope.cancel()
    with anyio.move_on_after(60):  # the group was killed before complete() returned
        while marked_pids(mark):  # noqa: ASYNC110 - /proc has no event
            await anyio.sleep(0.05)
    assert marked_pids(mark) == [], f"left running: {marked_pids(mark)} (pid {os.getpid()})"


async def test_no_prompt_persists_in_the_cli_homes(
    kind: CliKind, server: FakeAgentServer, homes: Path
) -> None:
    """Issue 11 item 17: copilot kept every session (prompt included), codex its sqlite."""
    mark = f"NO-RESIDUE-{uuid.uuid4().hex}"
    member = make_member(kind, server.base_url, homes, mark=mark)
    for i in range(2):
        await member.complete(req(f"{mark} {i} FAKE_REPLY[ok]"))
    before = len(server.requests)
    async with anyio.create_task_group() as tg:  # and one cancelled while it hangs
        tg.start_soon(member.complete, req(f"FAKE_HANG {mark}"))
        with anyio.fail_after(60):
            while not any(mark in str(r.body) for r in server.requests[before:]):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    with anyio.fail_after(60):  # the process group is killed before complete() returns
        while marked_pids(mark):  # noqa: ASYNC110 - /proc has no event
            await anyio.sleep(0.05)
    for root in (homes / kind.value, homes / "scratch"):
        kept = [p for p in root.rglob("*") if p.is_file() and mark.encode() in p.read_bytes()]
        assert kept == [], kept
    leftovers = {p.name for p in (homes / kind.value / "cli").iterdir()}
    assert not leftovers & {"session-state", "session-store.db", "sessions", "logs_2.sqlite",
                            "state_5.sqlite"}  # fmt: skip


async def test_harness_rollout_through_the_real_cli(
    kind: CliKind, server: FakeAgentServer, homes: Path, tmp_path: Path
) -> None:
    member = make_member(kind, server.base_url, homes)
    if kind is CliKind.COPILOT:  # no schema support: the plain last message is the answer
        hint = "FAKE_REPLY[<answer>bug</answer>]"
    else:
        hint = (
            "FAKE_TOOL[cat task.md] "
            'FAKE_REPLY[{"final_response": "<answer>bug</answer>", "final_answer": "bug"}]'
        )
    spec = WorkspaceSpec(
        skill=SkillFile(name="triage", description="Label issues", body="Prefer bug."),
        task="Label this issue.",
    )
    out = await run_rollout(
        member,
        spec,
        rollout_dir=tmp_path / "rollout",
        options=HarnessOptions(answer_hint=hint, label_pattern="bug|feature"),
    )
    assert out.answer.strip() == "<answer>bug</answer>" and out.label == "bug"
    assert out.summary.answer_format is AnswerFormat.TAGGED
    if kind is CliKind.CODEX:  # the agent really ran `cat task.md`, seen in its trace
        assert out.summary.task_read is ReadStatus.SUCCEEDED
        assert "cat task.md -> ok" in out.trace_text
    elif kind is CliKind.CLAUDE:  # read-only rollout: Claude gets Read, its Bash call is refused
        assert out.summary.task_read is ReadStatus.FAILED
        assert "[exec] cat task.md -> failed" in out.trace_text
    assert (tmp_path / "rollout" / "transcript.txt").read_text().startswith("=== attempt 1")


async def test_tool_use_is_verified_from_the_shim_log(
    kind: CliKind, server: FakeAgentServer, homes: Path
) -> None:
    member = make_member(kind, server.base_url, homes)
    ran = await member.complete(
        CompletionRequest(
            role=Role.TARGET,
            prompt="Look it up. FAKE_TOOL[tools/search weather] FAKE_REPLY[done]",
            metadata={"tools": ["search"]},
        )
    )
    assert ran.text.strip() == "done" and ran.tools_called == ("search",)
    claimed = await member.complete(
        CompletionRequest(
            role=Role.TARGET,
            prompt="Look it up. FAKE_REPLY[I called search: TOOL_CALL search]",
            metadata={"tools": ["search"]},
        )
    )
    assert claimed.tools_called == ()
