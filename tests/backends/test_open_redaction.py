"""No secret-shaped text leaves the machine, whichever entry point sends it.

Each entry point (a night through ``once``, ``harvest`` with the LLM miner, the trainer's
``train``) runs as a user would start it, against the fake model server on 127.0.0.1, with
secrets planted in everything it reads: transcripts, the live skill and memory, the
preferences, the trainer's initial skill. Every byte the server received is searched.
The redaction itself lives in one wrapper (:class:`skillopt.backends.wrappers.
RedactingCompleter`) that ``open_completer`` puts under every entry point's stack; the
members send what they are given, so the quick tests below open that stack over each kind
of member (HTTP and agent CLI) and check what reached the loopback server or the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import skillopt.cli
import skillopt_sleep.cli
from skillopt.backends.base import CompletionRequest, Message, Role
from skillopt.backends.open import open_completer
from skillopt.config import PoolConfig
from skillopt.redact import redact_text
from skillopt_sleep.demo import DemoSetup, prepare_demo
from support.demo_world_http import demo_reply_fn
from support.fake_cli import write_fake_cli
from support.fake_model_server import FakeModelServer, Request
from support.sleep_setup import write_config
from support.transcripts import append_to_first_prompts
from support.world_http import world_reply

REPO = Path(__file__).resolve().parents[2]
SECRETS = (
    "ghp_" + "Zq7" * 12,
    "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2",
    "AKIA" + "QWERTYUIOPASDFGH",
    "xoxb-" + "1234567890-abcdefghij",
)
PLANTED = " ".join(f"(credential {s})" for s in SECRETS)
KEY_ENV = "SKILLOPT_TEST_FAKE_KEY"


def openai_members(server: FakeModelServer) -> str:
    return f"""
[[pool.members]]
kind = "openai"
name = "m"
base_url = "{server.url("m")}"
api_key_env = "{KEY_ENV}"
model = "fake"
max_concurrency = 8
timeout = 10

[pool.roles]
target = ["m"]
optimizer = ["m"]
"""


def night(setup: DemoSetup, server: FakeModelServer) -> None:
    append_to_first_prompts(setup.claude_home, PLANTED)
    for live in (
        setup.config.live_skill_path(setup.project),
        setup.config.live_memory_path(setup.project),
    ):
        live.write_text(live.read_text() + f"\n- Deploy with {PLANTED}\n")
    config = write_config(setup, pool=openai_members(server))
    code = skillopt_sleep.cli.main(
        ["once", "--json", "--config", str(config), "--project", str(setup.project),
         "--preferences", f"Never print {PLANTED}"]
    )  # fmt: skip
    assert code == 0


def harvest(setup: DemoSetup, server: FakeModelServer) -> None:
    append_to_first_prompts(setup.claude_home, PLANTED)
    config = write_config(setup, pool=openai_members(server))
    code = skillopt_sleep.cli.main(
        ["harvest", "--json", "--config", str(config), "--project", str(setup.project),
         "--output", str(setup.root / "tasks.json")]
    )  # fmt: skip
    assert code == 0


def train(setup: DemoSetup, server: FakeModelServer) -> None:
    endpoints = setup.root / "endpoints.toml"
    endpoints.write_text(openai_members(server).replace("[pool.", "["))
    skill = setup.root / "skill.md"
    skill.write_text(f"Answer briefly. Look things up with {PLANTED}.\n")
    overrides = {
        "out_root": str(setup.root / "run"),
        "train.num_epochs": 1,
        "backend.kind": "pool",
        "backend.pool_config": str(endpoints),
        "env.skill_init": str(skill),
    }
    sets = [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    argv = ["train", "--config", str(REPO / "configs/trainer/qa_demo.toml")]
    code = skillopt.cli.main([*argv, *(a for s in sets for a in ("--set", s))])
    assert code == 0


Run = Callable[[DemoSetup, FakeModelServer], None]
# entry point -> how it runs, the model's replies, the fewest calls it makes
ENTRY_POINTS: dict[str, tuple[Run, Callable[[Request], str], int]] = {
    "night": (night, world_reply, 8),
    "harvest": (harvest, world_reply, 2),  # the demo's 16 sessions share 2 mining calls
    "train": (train, demo_reply_fn(), 8),
}


def test_the_planted_secrets_are_ones_the_redactor_knows() -> None:
    assert all(secret not in redact_text(PLANTED) for secret in SECRETS)


@pytest.mark.slow
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_no_secret_reaches_the_model_server(
    entry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "test-key-not-secret")
    monkeypatch.setenv("HOME", str(tmp_path))
    run, reply, fewest = ENTRY_POINTS[entry]
    with FakeModelServer(reply_fn=reply) as server:
        run(prepare_demo(tmp_path / "demo"), server)
        bodies = [r.raw_body for r in server.requests]
    assert len(bodies) >= fewest, "the entry point made too few model calls to tell"
    leaked = {s for s in SECRETS for body in bodies if s.encode() in body}
    assert not leaked, f"{entry} sent {sorted(leaked)}"
    assert any(b"[REDACTED:" in body for body in bodies), "the planted text was never sent"


# ------------------------------------------------------------- every member, through the stack
# What each fake CLI prints for a good answer (codex also writes its last message after -o).
CLI_REPLIES: dict[str, dict[str, str]] = {
    "claude": {"stdout": json.dumps({"type": "result", "result": "ok", "is_error": False})},
    "codex": {"stdout": json.dumps({"type": "turn.completed"}) + "\n", "last_message": "ok"},
    "copilot": {"stdout": json.dumps({"type": "assistant.message", "data": {"content": "ok"}})},
}
HTTP_KINDS = ("openai", "openai_responses")


def secret_request() -> CompletionRequest:
    return CompletionRequest(
        role=Role.TARGET,
        system=f"Instructions: {PLANTED}",
        messages=(
            Message(role="user", content=f"first {PLANTED}"),
            Message(role="assistant", content=f"seen {SECRETS[0]}"),
            Message(role="user", content=f"again {SECRETS[1]}"),
        ),
        max_output_tokens=50,
    )


def one_member_pool(member: dict[str, object]) -> PoolConfig:
    return PoolConfig.model_validate(
        {
            "members": [{"name": "m", **member}],
            "roles": {"target": ["m"], "optimizer": ["m"]},
            "cache": {"enabled": False},
        }
    )


def leaked_in(texts: list[str]) -> set[str]:
    return {s for s in SECRETS for text in texts if s in text}


@pytest.mark.parametrize("kind", HTTP_KINDS)
async def test_an_http_member_sends_only_what_the_stack_redacted(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "test-key-not-secret")
    with FakeModelServer() as server:
        pool = one_member_pool(
            {"kind": kind, "base_url": server.url("m"), "api_key_env": KEY_ENV, "model": "f"}
        )
        async with open_completer(pool) as stack:
            await stack.complete(secret_request())
        bodies = [r.raw_body.decode() for r in server.requests]
    assert len(bodies) == 1
    assert not leaked_in(bodies)
    assert "[REDACTED:" in bodies[0]


@pytest.mark.parametrize("kind", sorted(CLI_REPLIES))
async def test_a_cli_member_is_handed_only_what_the_stack_redacted(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    fake = write_fake_cli(tmp_path / "bin", kind, write_state=True, **CLI_REPLIES[kind])
    pool = one_member_pool({"kind": kind, "executable": str(fake.path)})
    async with open_completer(pool) as stack:
        await stack.complete(secret_request())
    (call,) = fake.calls()
    sent = [call["stdin"], *call["argv"]]
    assert not leaked_in(sent)
    assert "[REDACTED:" in " ".join(sent)
    kept = [p.read_text(errors="replace") for p in (tmp_path / "home").rglob("*") if p.is_file()]
    assert not leaked_in(kept), "the CLI kept a secret in its home"
