"""`harvest --output` previews what the next night would mine: with the LLM miner when the
night would use it (real HTTP to the fake model server on 127.0.0.1), heuristic otherwise."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from skillopt_sleep.cli import main
from skillopt_sleep.demo import DemoSetup, prepare_demo
from support.fake_model_server import FakeModelServer
from support.mining_replies import batch_reply
from support.sleep_setup import write_config

MINED = [{"intent": "Preview task from the LLM miner", "rubric": "Does the thing"}]


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(reply_fn=batch_reply(lambda entry: MINED)) as srv:
        yield srv


@pytest.fixture
def setup(tmp_path: Path) -> DemoSetup:
    return prepare_demo(tmp_path)


def _http_config(setup: DemoSetup, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SKILLOPT_TEST_KEY", "test-key")
    pool = f"""
[[pool.members]]
kind = "openai"
name = "opt"
base_url = "{server.url("opt")}"
api_key_env = "SKILLOPT_TEST_KEY"
model = "m"
timeout = 5

[pool.roles]
target = ["opt"]
optimizer = ["opt"]
"""
    return str(write_config(setup, pool=pool))


def _harvest(
    capsys: pytest.CaptureFixture[str], config: str, setup: DemoSetup, *extra: str
) -> dict[str, object]:
    out = setup.root / "tasks.json"
    code = main(["harvest", "--config", config, "--project", str(setup.project),
                 "--output", str(out), "--json", *extra])  # fmt: skip
    assert code == 0
    data: dict[str, object] = json.loads(capsys.readouterr().out)
    assert json.loads(out.read_text())["reviewed"] is False
    return data


def test_harvest_mines_with_the_llm_like_the_night(
    setup: DemoSetup,
    server: FakeModelServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = _harvest(capsys, _http_config(setup, server, monkeypatch), setup)
    intents = {t["intent"] for t in data["tasks"]}  # type: ignore[attr-defined]
    assert intents == {"Preview task from the LLM miner"}
    assert data["diagnostics"]["mine"]["miner"] == "llm"  # type: ignore[index]
    mine = data["diagnostics"]["mine"]  # type: ignore[index]
    assert (mine["sessions"], mine["requests"]) == (16, 16)  # type: ignore[index]
    assert len(server.requests) == mine["calls"] == 2  # type: ignore[index]  # requests share calls


def test_no_llm_flag_spends_nothing(
    setup: DemoSetup,
    server: FakeModelServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = _harvest(capsys, _http_config(setup, server, monkeypatch), setup, "--no-llm")
    assert data["diagnostics"]["mine"]["miner"] == "heuristic"  # type: ignore[index]
    assert len(data["tasks"]) == 16  # type: ignore[arg-type]
    assert server.requests == []


def test_harvest_says_what_it_spent(
    setup: DemoSetup,
    server: FakeModelServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = _http_config(setup, server, monkeypatch)
    data = _harvest(capsys, config, setup)
    assert data["model_calls"] == len(server.requests) == 2
    assert main(["harvest", "--config", config, "--project", str(setup.project)]) == 0
    out = capsys.readouterr().out
    assert "model calls: 0 (16 session(s) from the mining cache" in out  # paid once
    assert len(server.requests) == 2
    assert _harvest(capsys, config, setup, "--no-llm")["model_calls"] == 0


def test_readme_says_what_reviewing_costs() -> None:
    """The README's review path must not promise a preview that spends nothing."""
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    start = readme.index("harvest --output")
    sentence = " ".join(readme[start - 200 : start + 400].split())
    assert "before spending anything" not in sentence
    assert "optimizer-model call" in sentence and "`--no-llm`" in sentence
