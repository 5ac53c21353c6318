"""CLI members against small fake executables: argv/env contracts, parsing, failures, limits."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest

from skillopt.backends.base import CompletionRequest, ReplySchema, Role
from skillopt.backends.cli.common import CliKind, CliSpec, FailureClass, classify_text
from skillopt.backends.cli.member import CliBackend, build_cli_member
from skillopt.errors import (
    BackendAuthError,
    BackendError,
    BackendRequestError,
    BackendTimeoutError,
    ConfigError,
    RetryableBackendError,
)
from support.fake_cli import FakeCli, wait_dead, write_fake_cli

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent-home", "GW_KEY": "k-123"}


def member(
    fake: FakeCli,
    kind: CliKind,
    tmp_path: Path,
    environ: dict[str, str] | None = None,
    **kw: object,
) -> CliBackend:
    spec = CliSpec(kind=kind, name=f"{kind}-1", executable=str(fake.path), **kw)  # type: ignore[arg-type]
    return CliBackend(spec, environ=environ or ENV, scratch_root=tmp_path / "scratch")


def req(prompt: str = "What is 2+2?", **kw: object) -> CompletionRequest:
    return CompletionRequest(role=Role.TARGET, prompt=prompt, **kw)  # type: ignore[arg-type]


def codex_events(text: str) -> str:
    events = [
        {"type": "thread.started", "thread_id": "t"},
        {"type": "item.completed", "item": {"id": "0", "type": "error", "message": "metadata"}},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "1", "type": "agent_message", "text": text}},
        {"type": "turn.completed", "usage": {"input_tokens": 40, "output_tokens": 3}},
    ]
    return "".join(json.dumps(e) + "\n" for e in events)


def claude_result(text: str, *, is_error: bool = False, status: int | None = None) -> str:
    return json.dumps(
        {
            "type": "result",
            "subtype": "success",
            "is_error": is_error,
            "api_error_status": status,
            "result": text,
            "usage": {"input_tokens": 21, "output_tokens": 4},
        }
    )


# ------------------------------------------------------------------------------------- codex
async def test_codex_argv_env_and_reply(tmp_path: Path) -> None:
    fake = write_fake_cli(
        tmp_path / "bin", "codex", stdout=codex_events("from events"), last_message="ANSWER:4"
    )
    home = tmp_path / "codex-home"
    backend = member(
        fake,
        CliKind.CODEX,
        tmp_path,
        model="gpt-x",
        isolated_home=True,
        home_dir=home,
        provider_base_url="http://127.0.0.1:9/v1",
        provider_key_env="GW_KEY",
    )
    out = await backend.complete(req("Say FOUR"))
    assert out.text == "ANSWER:4"  # the -o file wins over events
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (40, 3)
    assert not out.usage.estimated
    (call,) = fake.calls()
    argv = call["argv"]
    assert argv[0] == "exec" and argv[-1] == "-"
    assert call["stdin"] == "Say FOUR"
    assert "Say FOUR" not in " ".join(argv)
    for flag in ("--skip-git-repo-check", "--ephemeral", "--json"):
        assert flag in argv
    pairs = list(itertools.pairwise(argv))
    assert ("--sandbox", "read-only") in pairs
    assert ("-m", "gpt-x") in pairs
    assert ("-c", "analytics.enabled=false") in pairs
    assert ("--disable", "plugins") in pairs
    assert ("--disable", "unbounded_connection_retries") in pairs
    assert ("--disable", "daemon_auto_start") in pairs
    assert ("-c", "model_providers.skillopt.base_url=http://127.0.0.1:9/v1") in pairs
    assert ("-c", "model_providers.skillopt.request_max_retries=0") in pairs
    assert ("-c", "model_providers.skillopt.stream_max_retries=0") in pairs
    assert ("-c", "model_providers.skillopt.env_key=GW_KEY") in pairs
    call_home = Path(call["env"]["CODEX_HOME"])  # a fresh home per call, removed after it
    assert call_home != home and home.is_dir() and not call_home.exists()  # noqa: ASYNC240
    assert Path(call["cwd"]).name == "work"  # a fresh temp dir, not our cwd
    assert not Path(call["cwd"]).exists()  # noqa: ASYNC240 - removed after the call


async def test_codex_uses_events_when_no_last_message_and_ignores_error_items(
    tmp_path: Path,
) -> None:
    fake = write_fake_cli(tmp_path / "bin", "codex", stdout=codex_events("event answer"))
    out = await member(fake, CliKind.CODEX, tmp_path).complete(req())
    assert out.text == "event answer"


async def test_codex_default_login_is_the_users(tmp_path: Path) -> None:
    user = tmp_path / "user"
    (user / ".codex").mkdir(parents=True)
    (user / ".codex" / "auth.json").write_text("{}")
    (user / ".codex" / "AGENTS.md").write_text("the user's own instructions")
    fake = write_fake_cli(tmp_path / "bin", "codex", stdout=codex_events("ok"))
    await member(fake, CliKind.CODEX, tmp_path, environ={**ENV, "HOME": str(user)}).complete(req())
    assert fake.calls()[0]["home"] == {"auth.json": str(user / ".codex" / "auth.json")}
    argv = fake.calls()[0]["argv"]
    assert not any(a.startswith("model_provider") for a in argv)


@pytest.mark.parametrize(
    ("error_line", "expected", "status"),
    [
        ("We’re currently experiencing high demand", RetryableBackendError, None),
        (
            "unexpected status 401 Unauthorized: bad key, url: http://127.0.0.1:1/v1/responses",
            BackendAuthError,
            401,
        ),
        ("Missing environment variable: GW_KEY", BackendAuthError, None),
        ("Connection failed: error sending request", RetryableBackendError, None),
        ("unexpected status 404 Not Found: model_not_found", BackendRequestError, 404),
    ],
)
async def test_codex_failures_are_classified(
    tmp_path: Path, error_line: str, expected: type[BackendError], status: int | None
) -> None:
    events = [{"type": "error", "message": error_line}, {"type": "turn.failed", "error": {}}]
    fake = write_fake_cli(
        tmp_path / "bin",
        "codex",
        stdout="".join(json.dumps(e) + "\n" for e in events),
        stderr="WARNING: noise\n",
        exit_code=1,
    )
    backend = member(fake, CliKind.CODEX, tmp_path)
    with pytest.raises(expected) as info:
        await backend.complete(req())
    assert error_line.split(":")[0] in info.value.cause
    assert info.value.status == status
    assert info.value.member == "codex-1"
    assert backend.last_error is info.value


async def test_codex_stderr_error_without_json(tmp_path: Path) -> None:
    fake = write_fake_cli(
        tmp_path / "bin",
        "codex",
        stderr="Reading additional input from stdin...\nERROR: Connection failed: refused\n",
        exit_code=1,
    )
    with pytest.raises(RetryableBackendError) as info:
        await member(fake, CliKind.CODEX, tmp_path).complete(req())
    assert "Connection failed" in info.value.cause
    assert "Reading additional" not in info.value.cause


# ------------------------------------------------------------------------------------ claude
async def test_claude_argv_env_and_reply(tmp_path: Path) -> None:
    fake = write_fake_cli(tmp_path / "bin", "claude", stdout=claude_result("ANSWER:7"))
    backend = member(
        fake,
        CliKind.CLAUDE,
        tmp_path,
        model="sonnet",
        isolated_home=True,
        home_dir=tmp_path / "cc",
        provider_base_url="http://127.0.0.1:9/v1",
        provider_key_env="GW_KEY",
    )
    out = await backend.complete(req("seven?"))
    assert out.text == "ANSWER:7"
    assert out.usage.prompt_tokens == 21
    (call,) = fake.calls()
    argv = call["argv"]
    assert argv[:4] == ["-p", "--output-format", "stream-json", "--verbose"]
    assert "--bare" in argv and "--no-session-persistence" in argv
    assert ("--tools", "") in list(itertools.pairwise(argv))
    assert call["stdin"] == "seven?"
    env = call["env"]
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"  # Claude adds /v1 itself
    assert env["ANTHROPIC_API_KEY"] == "k-123"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "0"
    assert env["DISABLE_AUTOUPDATER"] == "1"
    assert env["CLAUDE_CONFIG_DIR"] != str(tmp_path / "cc")  # a fresh home per call
    assert (tmp_path / "cc").is_dir()


async def test_claude_without_provider_uses_login(tmp_path: Path) -> None:
    user = tmp_path / "user"
    (user / ".claude").mkdir(parents=True)
    (user / ".claude" / ".credentials.json").write_text("{}")
    (user / ".claude.json").write_text("{}")
    fake = write_fake_cli(tmp_path / "bin", "claude", stdout=claude_result("ok"))
    environ = {**ENV, "HOME": str(user)}
    await member(fake, CliKind.CLAUDE, tmp_path, environ=environ).complete(req())
    call = fake.calls()[0]
    assert "--bare" not in call["argv"]
    assert call["env"]["ANTHROPIC_BASE_URL"] is None
    assert call["home"] == {
        ".credentials.json": str(user / ".claude" / ".credentials.json"),
        ".claude.json": str(user / ".claude.json"),  # beside ~/.claude in the default layout
    }


@pytest.mark.parametrize(
    ("status", "text", "expected"),
    [
        (500, "API Error: 500 fake error 500. This is a server-side issue", RetryableBackendError),
        (429, "API Error: 429 rate limited", RetryableBackendError),
        (401, "Failed to authenticate. API Error: 401 bad", BackendAuthError),
        (404, "API Error: 404 model not found", BackendRequestError),
    ],
)
async def test_claude_is_error_is_never_an_answer(
    tmp_path: Path, status: int, text: str, expected: type[BackendError]
) -> None:
    fake = write_fake_cli(
        tmp_path / "bin",
        "claude",
        stdout=claude_result(text, is_error=True, status=status),
        exit_code=1,
    )
    with pytest.raises(expected) as info:
        await member(fake, CliKind.CLAUDE, tmp_path).complete(req())
    assert info.value.status == status
    assert text[:20] in info.value.cause


async def test_claude_is_error_with_exit_zero_still_fails(tmp_path: Path) -> None:
    fake = write_fake_cli(
        tmp_path / "bin", "claude", stdout=claude_result("API Error: 503", is_error=True)
    )
    with pytest.raises(RetryableBackendError):
        await member(fake, CliKind.CLAUDE, tmp_path).complete(req())


async def test_claude_not_logged_in_text_is_auth(tmp_path: Path) -> None:
    fake = write_fake_cli(
        tmp_path / "bin", "claude", stdout="Not logged in · Please run /login\n", exit_code=1
    )
    with pytest.raises(BackendAuthError) as info:
        await member(fake, CliKind.CLAUDE, tmp_path).complete(req())
    assert "log in" in str(info.value)
    assert "Not logged in" in info.value.cause


async def test_garbage_output_is_a_malformed_reply(tmp_path: Path) -> None:
    fake = write_fake_cli(tmp_path / "bin", "claude", stdout="\x1b[31m%%% not json\n")
    with pytest.raises(RetryableBackendError) as info:
        await member(fake, CliKind.CLAUDE, tmp_path).complete(req())
    assert info.value.error_class == "malformed_output"
    assert "\x1b" not in info.value.cause


async def test_unknown_failure_is_not_retryable_and_redacted(tmp_path: Path) -> None:
    secret = "sk-abcdefghijklmnopqrstuvwx"
    fake = write_fake_cli(
        tmp_path / "bin", "codex", stderr=f"panic: something odd key={secret}\n", exit_code=3
    )
    with pytest.raises(BackendError) as info:
        await member(fake, CliKind.CODEX, tmp_path).complete(req())
    assert type(info.value) is BackendError and not info.value.retryable
    assert secret not in info.value.cause and "REDACTED" in info.value.cause


async def test_empty_answer_is_retryable(tmp_path: Path) -> None:
    fake = write_fake_cli(tmp_path / "bin", "claude", stdout=claude_result("   "))
    with pytest.raises(RetryableBackendError) as info:
        await member(fake, CliKind.CLAUDE, tmp_path).complete(req())
    assert info.value.error_class == "empty"


async def test_system_and_messages_are_rendered_into_one_prompt(tmp_path: Path) -> None:
    fake = write_fake_cli(tmp_path / "bin", "claude", stdout=claude_result("ok"))
    await member(fake, CliKind.CLAUDE, tmp_path).complete(req("the question", system="be brief"))
    stdin = fake.calls()[0]["stdin"]
    assert stdin.index("be brief") < stdin.index("the question")


# ----------------------------------------------------------------------------------- copilot
def copilot_events(*events: dict[str, object]) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


async def test_copilot_prompt_on_stdin_and_last_message(tmp_path: Path) -> None:
    fake = write_fake_cli(
        tmp_path / "bin",
        "copilot",
        stdout=copilot_events(
            {"type": "assistant.message", "data": {"content": "let me think"}},
            {"type": "assistant.message", "data": {"content": "ANSWER:9"}},
            {"type": "result", "exitCode": 0},
        ),
    )
    backend = member(
        fake,
        CliKind.COPILOT,
        tmp_path,
        model="gpt-4o-mini",
        provider_base_url="http://127.0.0.1:9/v1",
        provider_key_env="GW_KEY",
    )
    out = await backend.complete(req("secret prompt text"))
    assert out.text == "ANSWER:9"
    call = fake.calls()[0]
    assert call["stdin"] == "secret prompt text"
    assert "secret prompt text" not in " ".join(call["argv"])
    assert "--allow-all-tools" not in call["argv"]
    assert "bash" not in call["argv"][call["argv"].index("--available-tools") :]
    assert {"-s", "--no-auto-update", "--disable-builtin-mcps"} <= set(call["argv"])
    env = call["env"]
    assert env["COPILOT_OFFLINE"] == "true" and env["COPILOT_AUTO_UPDATE"] == "false"
    assert env["COPILOT_PROVIDER_BASE_URL"] == "http://127.0.0.1:9/v1"
    assert env["COPILOT_PROVIDER_API_KEY"] == "k-123"


async def test_copilot_first_model_failure_stops_its_own_retries(tmp_path: Path) -> None:
    failure = {"type": "model.call_failure", "data": {"statusCode": 500, "failureKind": "api"}}
    fake = write_fake_cli(tmp_path / "bin", "copilot", stdout=copilot_events(failure), hang=True)
    # stopped at the first failure: the guard fires long before the 600 s timeout
    with anyio.fail_after(60), pytest.raises(RetryableBackendError) as info:
        await member(fake, CliKind.COPILOT, tmp_path, timeout=600).complete(req())
    assert info.value.status == 500
    child = int(fake.child_pid_path.read_text())
    assert wait_dead(child)


async def test_copilot_session_auth_error(tmp_path: Path) -> None:
    fake = write_fake_cli(
        tmp_path / "bin",
        "copilot",
        stdout=copilot_events(
            {
                "type": "session.error",
                "data": {"errorType": "authentication", "message": "Authentication failed"},
            },
            {"type": "result", "exitCode": 1},
        ),
        exit_code=1,
    )
    with pytest.raises(BackendAuthError):
        await member(fake, CliKind.COPILOT, tmp_path).complete(req())


# ------------------------------------------------------------------- process-level behaviour
async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    fake = write_fake_cli(tmp_path / "bin", "codex", stdout="partial output\n", hang=True)
    started = time.monotonic()
    with anyio.fail_after(60), pytest.raises(BackendTimeoutError) as info:  # the CLI hangs
        await member(fake, CliKind.CODEX, tmp_path, timeout=1.0).complete(req())
    assert time.monotonic() - started >= 0.9  # the 1 s timeout
    assert "partial output" in info.value.cause
    assert wait_dead(int(fake.child_pid_path.read_text()))
    assert wait_dead(fake.calls()[0]["pid"])


async def test_cancellation_kills_the_whole_process_group(tmp_path: Path) -> None:
    fake = write_fake_cli(tmp_path / "bin", "codex", hang=True)
    backend = member(fake, CliKind.CODEX, tmp_path, timeout=30)
    with anyio.move_on_after(1.0):
        await backend.complete(req())
    assert wait_dead(int(fake.child_pid_path.read_text()))
    assert wait_dead(fake.calls()[0]["pid"])


async def test_huge_output_is_bounded(tmp_path: Path) -> None:
    fake = write_fake_cli(tmp_path / "bin", "codex", huge_bytes=8 * 1024 * 1024)
    with pytest.raises(RetryableBackendError) as info:
        await member(fake, CliKind.CODEX, tmp_path, max_output_bytes=256 * 1024).complete(req())
    assert info.value.error_class == "too_large"
    assert len(info.value.cause) < 5000


async def test_missing_executable_at_call_time(tmp_path: Path) -> None:
    spec = CliSpec(kind=CliKind.CODEX, name="c", executable=str(tmp_path / "gone"))
    with pytest.raises(BackendRequestError):
        await CliBackend(spec, environ=ENV).complete(req())


async def test_member_limits_its_own_concurrency(tmp_path: Path) -> None:
    fake = write_fake_cli(tmp_path / "bin", "claude", stdout=claude_result("ok"), sleep=0.4)
    backend = member(fake, CliKind.CLAUDE, tmp_path, max_concurrency=2)
    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(backend.complete, req())
    elapsed = time.monotonic() - started
    assert elapsed >= 0.8  # two waves of two
    assert len(fake.calls()) == 4


# ------------------------------------------------------------------------------- tool shims
async def test_tools_called_comes_from_the_shim_log(tmp_path: Path) -> None:
    fake = write_fake_cli(
        tmp_path / "bin",
        "codex",
        stdout=codex_events("done"),
        run_tools=[["search", "weather in paris"]],
    )
    out = await member(fake, CliKind.CODEX, tmp_path).complete(
        req("find it", metadata={"tools": ["search", "lookup"]})
    )
    assert out.tools_called == ("search",)
    call = fake.calls()[0]
    assert "tools/search" in call["stdin"]  # the agent is told about the shims
    assert ("--sandbox", "workspace-write") in list(
        zip(call["argv"], call["argv"][1:], strict=False)
    )


async def test_claimed_tool_use_does_not_count(tmp_path: Path) -> None:
    fake = write_fake_cli(tmp_path / "bin", "codex", stdout=codex_events("TOOL_CALL: search"))
    out = await member(fake, CliKind.CODEX, tmp_path).complete(
        req("find it", metadata={"tools": ["search"]})
    )
    assert out.tools_called == ()


# ---------------------------------------------------------------------- config and classify
def test_build_cli_member_from_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = write_fake_cli(tmp_path / "bin", "codex")
    cfg = SimpleNamespace(
        kind="codex",
        name="cx",
        executable=None,
        model="m",
        isolated_home=False,
        home_dir=None,
        provider_base_url=None,
        provider_key_env=None,
        extra_args=["--foo"],
        timeout=12.0,
        max_concurrency=3,
    )
    monkeypatch.setenv("PATH", f"{fake.path.parent}:/usr/bin:/bin")
    backend = build_cli_member(cfg)
    assert backend.spec.executable == str(fake.path)
    assert backend.spec.extra_args == ("--foo",) and backend.limiter.total_tokens == 3
    assert backend.name == "cx" and backend.model == "m"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ConfigError):
        build_cli_member(cfg)
    with pytest.raises(ConfigError):
        build_cli_member(SimpleNamespace(kind="cursor", name="x"))


@pytest.mark.parametrize(
    ("text", "status", "expected"),
    [
        ("anything", 503, FailureClass.RETRYABLE),
        ("anything", 401, FailureClass.AUTH),
        ("anything", 422, FailureClass.REQUEST),
        ("API Error: 529 overloaded", None, FailureClass.RETRYABLE),
        ("Invalid API key · Fix external API key", None, FailureClass.AUTH),
        ("This model requires a newer version of Codex", None, FailureClass.REQUEST),
        ("stream disconnected before completion", None, FailureClass.RETRYABLE),
        ("segfault", None, FailureClass.OTHER),
    ],
)
def test_classify_text(text: str, status: int | None, expected: FailureClass) -> None:
    assert classify_text(text, status) is expected


async def test_private_temp_home_is_created_once_and_removed_on_close(tmp_path: Path) -> None:
    fake = write_fake_cli(tmp_path / "bin", "codex", stdout=codex_events("ok"))
    backend = member(fake, CliKind.CODEX, tmp_path, isolated_home=True)
    home = backend.home()
    assert home is not None
    (home / "auth.json").write_text("{}")
    await backend.complete(req())
    await backend.complete(req())
    assert backend.home() == home and home.is_dir()
    call_homes = {c["env"]["CODEX_HOME"] for c in fake.calls()}
    assert len(call_homes) == 2 and str(home) not in call_homes  # one fresh home per call
    assert all(c["home"] == {"auth.json": str(home / "auth.json")} for c in fake.calls())
    await backend.aclose()
    assert not home.exists()


async def test_usage_is_estimated_when_the_cli_reports_none(tmp_path: Path) -> None:
    fake = write_fake_cli(
        tmp_path / "bin",
        "copilot",
        stdout='{"type":"assistant.message","data":{"content":"a fairly long answer"}}\n',
    )
    out = await member(fake, CliKind.COPILOT, tmp_path).complete(req("x" * 400))
    assert out.usage.estimated and out.usage.prompt_tokens == 100


@pytest.mark.parametrize("kind", [CliKind.CODEX, CliKind.CLAUDE, CliKind.COPILOT])
async def test_missing_provider_key_fails_before_spawning(tmp_path: Path, kind: CliKind) -> None:
    fake = write_fake_cli(tmp_path / "bin", kind.value, stdout="never")
    backend = member(
        fake,
        kind,
        tmp_path,
        provider_base_url="http://127.0.0.1:9/v1",
        provider_key_env="NOT_SET_KEY",
    )
    with pytest.raises(BackendAuthError) as info:
        await backend.complete(req())
    assert "NOT_SET_KEY" in str(info.value) and backend.last_error is info.value
    assert fake.calls() == []


def test_tool_shims_log_calls_and_print_fixed_output(tmp_path: Path) -> None:
    import subprocess

    from skillopt.backends.cli.tool_shims import install_shims, read_calls

    shims = install_shims(tmp_path / "ws", tmp_path / "log", ["search"], {"search": "3 hits"})
    ran = subprocess.run(
        [str(shims.bin_dir / "search"), "weather", "in paris"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert ran.stdout == "3 hits\n"
    assert read_calls(shims.log_path) == [("search", "weather in paris")]
    assert shims.calls() == ("search",)
    assert not shims.log_path.is_relative_to(tmp_path / "ws")  # outside the agent's workspace
    with pytest.raises(ConfigError):
        install_shims(tmp_path / "ws", tmp_path / "log", ["rm -rf /"])


# ------------------------------------------------------------------------- provider caching
async def test_cli_members_report_the_prompt_tokens_their_provider_cached(
    tmp_path: Path,
) -> None:
    """claude counts cache reads and writes apart from input_tokens (the prompt is all
    three); codex counts cached_input_tokens inside input_tokens."""
    claude = json.dumps(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "result": "ANSWER:7",
            "usage": {
                "input_tokens": 5,
                "cache_read_input_tokens": 300,
                "cache_creation_input_tokens": 20,
                "output_tokens": 4,
            },
        }
    )
    codex = codex_events("x").replace(
        '"input_tokens": 40,', '"input_tokens": 40, "cached_input_tokens": 32,'
    )
    seen = []
    for kind, stdout in ((CliKind.CLAUDE, claude), (CliKind.CODEX, codex)):
        fake = write_fake_cli(tmp_path / kind.value, kind.value, stdout=stdout, last_message="A")
        out = await member(fake, kind, tmp_path / kind.value).complete(req("seven?"))
        seen.append((out.usage.prompt_tokens, out.usage.cached_tokens))
    assert seen == [(325, 300), (40, 32)]


# -------------------------------------------------------------------------- structured replies
VERDICT_SCHEMA = ReplySchema(
    name="verdict",
    schema={
        "type": "object",
        "properties": {"score": {"type": "number"}},
        "required": ["score"],
        "additionalProperties": False,
    },
)


async def test_claude_is_given_the_replys_schema_and_its_object_is_the_answer(
    tmp_path: Path,
) -> None:
    """``--json-schema`` carries the request's schema; the object claude validated against
    it (``structured_output``) is the answer when it printed no text."""
    result = json.loads(claude_result(""))
    result["structured_output"] = {"score": 0.5}
    fake = write_fake_cli(tmp_path / "bin", "claude", stdout=json.dumps(result))
    backend = member(fake, CliKind.CLAUDE, tmp_path)
    out = await backend.complete(req("judge it", reply_schema=VERDICT_SCHEMA))
    assert json.loads(out.text) == {"score": 0.5}
    pairs = list(itertools.pairwise(fake.calls()[0]["argv"]))
    assert ("--json-schema", json.dumps(VERDICT_SCHEMA.schema)) in pairs


async def test_codex_is_given_the_replys_schema_as_a_file(tmp_path: Path) -> None:
    fake = write_fake_cli(
        tmp_path / "bin", "codex", stdout=codex_events("x"), last_message='{"score": 1}'
    )
    backend = member(fake, CliKind.CODEX, tmp_path)
    out = await backend.complete(req("judge it", reply_schema=VERDICT_SCHEMA))
    assert json.loads(out.text) == {"score": 1}
    assert "--output-schema" in fake.calls()[0]["argv"]
