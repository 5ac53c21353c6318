"""No new evidence, no learning (issue 30, lever 4): a task that failed under every document
the nights tried, with no new session and unchanged documents, does not make the night a
learning night again. The memory of that failure is the archive's answers, keyed by the
documents' content hash and the models, so a changed document brings the task back."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from skillopt.types import TaskRecord
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.entry import NightOutcome, NightResult, run_night
from skillopt_sleep.tasks.archive import open_archive
from skillopt_sleep.tasks.records import Question, SampleAnswer, TriedDocuments
from support.fake_model_server import FakeModelServer, Request
from support.world_http import world_reply

JUDGE = "# What a good answer does"
ASKED = "# What the user asked\n\n"


def _intent(request: Request) -> str:
    text = request.user_text
    return text.split(ASKED, 1)[1].split("\n\n" + JUDGE, 1)[0].strip() if ASKED in text else ""


class StuckWorld:
    """The demo world, except that the judge fails every answer to one task (``stuck``, the
    first judged): no document the nights try makes it pass."""

    def __init__(self) -> None:
        self.stuck = ""

    def __call__(self, request: Request) -> str:
        text = request.user_text
        if JUDGE in text and ASKED in text:
            intent = _intent(request)
            self.stuck = self.stuck or intent
            if intent == self.stuck:
                return json.dumps({"score": 0.0, "reason": "missing: something no edit gives"})
        return world_reply(request)


def _config(demo: DemoSetup, url: str) -> SleepConfig:
    data = demo.config.model_dump(mode="json")
    data["auto_adopt"] = True
    data["night"].update(llm_mine=False)
    data["pool"] = {
        "members": [{"kind": "openai", "name": "m", "base_url": url, "model": "fake",
                     "api_key_env": "SKILLOPT_TEST_FAKE_KEY", "max_concurrency": 8,
                     "timeout": 10, "request": {"temperature": 0}}],
        "roles": {"target": ["m"], "optimizer": ["m"]},
        "retry": {"max_attempts": 1, "base_delay": 0.0, "max_delay": 0.0},
    }  # fmt: skip
    return SleepConfig.model_validate(data)


def _calls(outcome: NightOutcome) -> int:
    return int(outcome.spend["calls"])


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DemoSetup:
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "test-key-not-secret")
    return prepare_demo(tmp_path)


@pytest.mark.slow
async def test_a_task_failing_under_every_document_tried_leaves_the_next_night_quiet(
    demo: DemoSetup,
) -> None:
    world = StuckWorld()
    with FakeModelServer(reply_fn=world) as server:
        cfg = _config(demo, server.url("m"))
        first = await run_night(cfg, project=demo.project)
        assert first.accepted, first.reason  # the other tasks learned; the stuck one failed
        second = await run_night(cfg, project=demo.project)
        assert _calls(second) <= 5, second.spend  # the drift check's few calls at most
        assert second.result is NightResult.NO_EDITS
        assert second.reason.startswith("quiet night: no new session;"), second.reason
        assert f"{second.n_tasks - 1} of the {second.n_tasks} task(s) already pass" in second.reason
        assert "and 1 failed under every document the nights tried" in second.reason
        report = json.loads((second.run_dir / "report.json").read_text())  # type: ignore[operator]
        assert report["baseline"] == pytest.approx((second.n_tasks - 1) / second.n_tasks)
        # the memory is keyed by the documents' content: a changed document brings it back
        memory = cfg.live_memory_path(demo.project)
        memory.write_text(memory.read_text() + "\n- A line the user added today.\n")
        edited = await run_night(cfg, project=demo.project)
    assert not edited.reason.startswith("quiet night"), edited.reason
    assert edited.spend["calls_by_stage"].get("rollout", 0) >= edited.n_tasks, edited.spend


def _question(task: str, docs: str) -> Question:
    return Question(task_id=task, task_hash="h", docs_hash=docs, answer_key="k")


def test_the_archive_says_how_a_task_fared_under_every_document_tried(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    with open_archive(tmp_path / "archive.sqlite") as archive:
        archive.record_mined([TaskRecord(id="t", intent="x", project="p")], night=1, now=now)
        assert archive.tried(_question("t", "a")) == TriedDocuments()
        fails = [SampleAnswer(question=_question("t", d), sample_id=i, score=0.5)
                 for d in ("a", "b") for i in range(2)]  # fmt: skip
        archive.record_answers(fails, night=1, run_id="r1", now=now)
        assert archive.tried(_question("t", "a")) == TriedDocuments(documents=2, samples=4)
        other = Question(task_id="t", task_hash="h", docs_hash="a", answer_key="other-model")
        assert archive.tried(other) == TriedDocuments()  # another model: nothing tried
        passed = SampleAnswer(question=_question("t", "c"), sample_id=0, score=1.0)
        archive.record_answers([passed], night=2, run_id="r2", now=now)
        assert archive.tried(_question("t", "a")) == TriedDocuments(documents=3, samples=5,
                                                                    passes=1)  # fmt: skip
