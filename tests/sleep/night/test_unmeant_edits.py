"""A night whose optimizer echoes its prompt's example spends no trial on the echo.

Over the fake OpenAI server on 127.0.0.1 playing the demo world, every reflection answers
with the reflect prompt's own example (``{"op": "add", "content": "<instruction>"}``), as
a small instruct model did. The edit is refused before any trial: the night stages
nothing, runs no gate trial, asks the reflection no second time, and its diagnostics say why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.rundir import RunStatus
from support.fake_model_server import FakeModelServer, Reply, Request
from support.sleep_setup import http_config
from support.world_http import world_reply

ECHO = '[{"op": "add", "content": "<instruction>", "anchor": "", "rationale": "<why it helps>"}]'


def _is_reflection(request: Request) -> bool:
    text = request.user_text
    return "# Failed tasks" in text or "# Attempt groups" in text


def _echoing(request: Request) -> Reply:
    return Reply(text=ECHO if _is_reflection(request) else world_reply(request))


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DemoSetup:
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "test-key-not-secret")
    return prepare_demo(tmp_path)


async def test_the_prompts_example_is_refused_before_any_trial(setup: DemoSetup) -> None:
    with FakeModelServer(rule=_echoing) as server:
        config = http_config(setup, server, folds=2)
        outcome = await run_night(config, project=setup.project)
        reflections = [r for r in server.requests if _is_reflection(r)]
    assert outcome.status is RunStatus.COMPLETE
    diagnostics = json.loads((outcome.run_dir / "diagnostics.json").read_text())
    outcomes = list(diagnostics["reflect"].values())
    assert outcomes and all(not o["edits"] for o in outcomes)
    refused = [why for o in outcomes for why in o["refused"]]
    assert refused and all("the prompt's own example" in why for why in refused)
    assert not any("could not be used" in r.user_text for r in reflections)  # no re-ask
    trials = json.loads((outcome.run_dir / "trials.json").read_text())["trials"]
    assert trials == []
    assert not (outcome.run_dir / "proposal").exists()


async def test_a_reflection_is_asked_for_at_most_its_edit_budget_of_bounded_edits(
    setup: DemoSetup,
) -> None:
    """SmolLM2 ran on, edit after edit and "This is a task." after "This is a task.", until
    its token cap cut the reply inside its list: none of its edits could be read (issue 31).
    The bounded schema a grammar-constrained server enforces ends both in time."""
    with FakeModelServer(rule=_echoing) as server:
        config = http_config(setup, server, folds=2)
        await run_night(config, project=setup.project)
        reflections = [r for r in server.requests if _is_reflection(r)]
    assert reflections
    for request in reflections:
        schema = request.body["response_format"]["json_schema"]["schema"]
        assert schema["properties"]["edits"]["maxItems"] == config.night.edit_budget
        edit = schema["$defs"]["_Edit"]["properties"]
        assert edit["content"]["maxLength"] == 400 and edit["rationale"]["maxLength"] == 200


async def test_an_echo_after_an_unusable_reply_is_said_refused_not_failed(
    setup: DemoSetup,
) -> None:
    """The reflection's first reply unusable, its second the prompt's example: the edit was
    refused, and the night says so (it said 'reflection failed: ...' of the first reply)."""
    asked: set[str] = set()

    def rule(request: Request) -> Reply:
        if not _is_reflection(request):
            return Reply(text=world_reply(request))
        if "could not be used" in request.user_text:
            return Reply(text=ECHO)
        asked.add(request.user_text)
        return Reply(text='{"edits": [{"op": "add", "content": "cut sh')

    with FakeModelServer(rule=rule) as server:
        config = http_config(setup, server, folds=2)
        outcome = await run_night(config, project=setup.project)
    assert asked
    reasons = json.loads((outcome.run_dir / "report.json").read_text())["no_edit_reasons"]
    learning = [r for r in reasons if "already succeeds" not in r]
    assert learning and all("refused before any trial" in r for r in learning), learning
