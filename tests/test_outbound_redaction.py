"""No secret-shaped text leaves the machine, whichever entry point sends it.

Each entry point (a night through ``once``, ``harvest`` with the LLM miner, the trainer's
``train``) runs as a user would start it, against the fake model server on 127.0.0.1, with
secrets planted in everything it reads: transcripts, the live skill and memory, the
preferences, the trainer's initial skill. Every byte the server received is searched.
The redaction itself lives in one wrapper (:class:`skillopt.backends.wrappers.
RedactingCompleter`) that ``open_completer`` puts under every entry point's stack.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import skillopt.cli
import skillopt_sleep.cli
from skillopt.redact import redact_text
from skillopt.trainer.envs.qa import QAEnvironment
from skillopt_sleep.demo import DemoSetup, prepare_demo
from support.fake_model_server import FakeModelServer, Request
from support.sleep_setup import write_config
from support.trainer_fakes import demo_reply_fn
from support.transcripts import append_to_first_prompts
from support.world_http import world_reply

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
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
    for live in (setup.config.live_skill_path(), setup.config.live_memory_path(setup.project)):
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
ENTRY_POINTS: dict[str, tuple[Run, Callable[[Request], str]]] = {
    "night": (night, world_reply),
    "harvest": (harvest, world_reply),
    "train": (train, demo_reply_fn(QAEnvironment())),
}


def test_the_planted_secrets_are_ones_the_redactor_knows() -> None:
    assert all(secret not in redact_text(PLANTED) for secret in SECRETS)


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_no_secret_reaches_the_model_server(
    entry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "test-key-not-secret")
    monkeypatch.setenv("HOME", str(tmp_path))
    run, reply = ENTRY_POINTS[entry]
    with FakeModelServer(reply_fn=reply) as server:
        run(prepare_demo(tmp_path / "demo"), server)
        bodies = [r.raw_body for r in server.requests]
    assert len(bodies) >= 8, "the entry point made too few model calls to tell"
    leaked = {s for s in SECRETS for body in bodies if s.encode() in body}
    assert not leaked, f"{entry} sent {sorted(leaked)}"
    assert any(b"[REDACTED:" in body for body in bodies), "the planted text was never sent"
