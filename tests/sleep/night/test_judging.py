"""A broken model judge fails the night at the stage it broke in, over real HTTP.

Issue 11 item 3: with every judge reply unusable (not JSON, wrong schema, a score that is
not a number, empty, a 200 with an HTML page), rubric tasks scored 0, the night exited 0
and accepted edits validated on the rule-checked tasks alone, and the report said
"failed calls: 0". Now an unusable verdict is a failed call (retried by the pool like any
other, counted), and past ``night.max_judge_failures`` the night fails naming the stage
and the cause.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt_sleep.cli import main
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.rundir import RunStatus
from support.fake_model_server import FakeModelServer, Reply, Request
from support.sleep_setup import http_config, write_config
from support.world_http import world_reply

JUDGE_PROMPT = "# What a good answer does"
HTML = b"<!DOCTYPE html><html><body><h1>Sign in to the gateway</h1></body></html>"

BROKEN: dict[str, tuple[Reply, str]] = {
    # name: (what the judge endpoint answers, what the night's failure must say)
    "prose": (Reply(text="I think the answer is quite good."), "no JSON in the reply"),
    "wrong_schema": (Reply(text='{"verdict": "good"}'), "score: Field required"),
    "score_not_a_number": (Reply(text='{"score": "very high"}'), "score: Input should be"),
    "empty": (Reply(text=""), "empty reply"),
    "html_page": (Reply(raw=HTML, content_type="text/html"), "HTML page"),
}


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DemoSetup:
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "test-key-not-secret")
    return prepare_demo(tmp_path)


@pytest.fixture
def mixed_tasks(setup: DemoSetup, capsys: pytest.CaptureFixture[str]) -> Path:
    """The demo's mined tasks, reviewed, every other one judged by a rule check instead.
    A sync fixture: the CLI runs its own event loop, outside the test's."""
    path = setup.root / "tasks.json"
    code = main(["harvest", "--config", str(write_config(setup)), "--project",
                 str(setup.project), "--no-llm", "--output", str(path)])  # fmt: skip
    capsys.readouterr()
    assert code == 0
    document = json.loads(path.read_text())
    for task in document["tasks"][::2]:
        task["reference_kind"] = "rule"
        task["checks"] = [{"op": "no_refusal"}]
    document["reviewed"] = True
    path.write_text(json.dumps(document))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BROKEN))
async def test_broken_judge_fails_the_night_at_its_stage(
    name: str, setup: DemoSetup, mixed_tasks: Path
) -> None:
    broken, says = BROKEN[name]
    tasks = mixed_tasks

    def rule(request: Request) -> Reply | None:
        return broken if JUDGE_PROMPT in request.user_text else None

    with FakeModelServer(reply_fn=world_reply, rule=rule) as server:
        outcome = await run_night(
            http_config(setup, server), project=setup.project, tasks_file=tasks
        )
        judge_requests = sum(JUDGE_PROMPT in r.user_text for r in server.requests)
    assert outcome.status is RunStatus.FAILED and outcome.exit_code == 1
    assert outcome.failed_stage == "rollouts"
    assert "judging failed for" in outcome.reason and says in outcome.reason
    spend = outcome.spend
    failed_judge_calls = spend["failures"]
    assert failed_judge_calls > 0 and spend["calls_by_stage"]["judge"] == failed_judge_calls
    # every request counts (issue 31): each judging was sent twice (max_attempts = 2), and
    # the spend counts both, as the server does
    assert judge_requests == failed_judge_calls and judge_requests % 2 == 0
    assert outcome.report_path is not None
    report = outcome.report_path.read_text()
    assert f"failed calls: {failed_judge_calls}" in report and says in report


@pytest.mark.slow
async def test_a_few_judge_failures_below_the_limit_do_not_fail_the_night(
    setup: DemoSetup, mixed_tasks: Path
) -> None:
    tasks = mixed_tasks
    doomed: list[str] = []  # the first answer judged: every verdict on it is unusable

    def rule(request: Request) -> Reply | None:
        if JUDGE_PROMPT not in request.user_text:
            return None
        doomed[:] = doomed or [request.user_text]
        return Reply(text="not a verdict") if request.user_text == doomed[0] else None

    with FakeModelServer(reply_fn=world_reply, rule=rule) as server:
        outcome = await run_night(
            http_config(setup, server), project=setup.project, tasks_file=tasks
        )
    assert outcome.status is RunStatus.COMPLETE, outcome.reason
    assert outcome.spend["failures"] >= 1
    assert set(outcome.spend["errors_by_class"]) == {"bad_reply"}
