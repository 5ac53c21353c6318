"""Over real HTTP (the fake model server on 127.0.0.1 playing the world): a quiet night's
drift check re-samples the tasks steady the longest, so a model that changed under the same
name is caught; and a night whose staged documents still fail a task samples them no more
(the night after their adoption measures again anyway)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.entry import NightOutcome, run_night
from skillopt_sleep.night.outcome import read_live
from skillopt_sleep.night.quiet.questions import answer_key, task_hash
from skillopt_sleep.replay import Docs
from skillopt_sleep.state import project_dir
from skillopt_sleep.tasks.archive import archive_path, open_archive
from skillopt_sleep.tasks.records import Question
from support.fake_model_server import FakeModelServer, Request
from support.sleep_setup import http_config
from support.world_http import world_reply

REFUSAL = "Sorry, I cannot help with that."


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DemoSetup:
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "test-key-not-secret")
    return prepare_demo(tmp_path)


def _adopting(cfg: SleepConfig) -> SleepConfig:
    data = cfg.model_dump(mode="json")
    data["auto_adopt"] = True  # what a user running `once && adopt` every night gets
    return SleepConfig.model_validate(data)


def _attempt_intent(request: Request) -> str | None:
    """The task an attempt prompt asks for (None for judge, reflect and mining prompts)."""
    text = request.user_text
    if "# Project notes" not in text:
        return None
    return text.split("\n\n# Task\n\n", 1)[1].split("\n\n")[0].strip()


def _rollouts(outcome: NightOutcome) -> list[dict[str, Any]]:
    assert outcome.run_dir is not None
    text = (outcome.run_dir / "rollouts.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.slow
async def test_a_model_changed_under_the_same_name_is_caught_by_the_drift_check(
    setup: DemoSetup,
) -> None:
    drifted = {"on": False}

    def reply(request: Request) -> str:
        if drifted["on"] and _attempt_intent(request) is not None:
            return REFUSAL  # the provider swapped the model behind the same name
        return world_reply(request)

    with FakeModelServer(reply_fn=reply) as server:
        cfg = _adopting(http_config(setup, server))
        assert cfg.night.drift_check_calls == 3  # on by default
        first = await run_night(cfg, project=setup.project)
        assert first.accepted
        quiet = await run_night(cfg, project=setup.project)
        assert quiet.reason.startswith("quiet night: no new session;"), quiet.reason
        assert 0 < quiet.spend["calls"] <= 3, quiet.spend
        assert "drift check: 1 task(s) steady the longest re-sampled, unchanged" in quiet.reason
        # the quiet night's estimate was said before its calls, and it is what it spent
        estimate = json.loads((quiet.run_dir / "report.json").read_text())["estimate_detail"]
        assert estimate is not None and estimate["calls"] == quiet.spend["calls"], estimate
        checked = {r["task_id"] for r in _rollouts(quiet)}
        drifted["on"] = True
        caught = await run_night(cfg, project=setup.project)

    assert not caught.reason.startswith("quiet night"), caught.reason
    assert caught.run_dir is not None
    report = json.loads((caught.run_dir / "report.json").read_text())
    assert any(n.startswith("drift check: 1 of the 1 task(s)") for n in report["notes"])
    assert caught.spend["calls_by_stage"]["rollout"] >= caught.n_tasks  # measured again
    rows = [r for r in _rollouts(caught) if r["phase"] == "rollout"]
    # the drift sample was the rollouts' own first sample: read back, never paid twice
    keys = [(r["task_id"], r["skill_hash"], r["memory_hash"], r["sample_id"]) for r in rows]
    assert len(keys) == len(set(keys))
    # what was drawn under the live documents now disagrees with their records
    live = Docs(skill=read_live(cfg.live_skill_path(setup.project))[0],
                memory=read_live(cfg.live_memory_path(setup.project))[0])  # fmt: skip
    path = archive_path(project_dir(cfg.state_path(), setup.project))
    with open_archive(path) as archive:
        questions = {
            t.id: Question(task_id=t.id, task_hash=task_hash(t.task), docs_hash=live.key,
                           answer_key=answer_key(cfg))
            for t in archive.tasks()
        }  # fmt: skip
        found = archive.noise(list(questions.values()))
    noisy = {tid for tid, q in questions.items() if q in found and not found[q].steady}
    assert noisy and noisy >= checked, (noisy, checked)


@pytest.mark.slow
async def test_documents_that_still_fail_a_task_are_not_sampled_for_the_next_night(
    setup: DemoSetup,
) -> None:
    hopeless: dict[str, str] = {}

    def reply(request: Request) -> str:
        intent = _attempt_intent(request)
        if intent is not None:
            hopeless.setdefault("intent", intent)  # the first task asked never passes
            if intent == hopeless["intent"]:
                return REFUSAL
        return world_reply(request)

    with FakeModelServer(reply_fn=reply) as server:
        # one round: its union's documents are staged, sampled once per task by then
        cfg = _adopting(http_config(setup, server, rounds=1))
        first = await run_night(cfg, project=setup.project)
    assert first.accepted  # the other tasks learned
    assert "steady" not in first.spend["calls_by_stage"], first.spend
    assert not any(r["phase"] == "steady" for r in _rollouts(first))


@pytest.mark.slow
async def test_a_failed_recheck_says_the_learning_nights_estimate(setup: DemoSetup) -> None:
    """A night that looked quiet but for one task to re-sample says that sample's cost
    first; when the sample fails, the night learns, and it says what learning costs before
    the learning calls (not only the revision after the first rollouts)."""
    failing = {"on": False}

    def reply(request: Request) -> str:
        if failing["on"] and _attempt_intent(request) is not None:
            return REFUSAL
        return world_reply(request)

    with FakeModelServer(reply_fn=reply) as server:
        data = _adopting(http_config(setup, server)).model_dump(mode="json")
        data["night"]["drift_check_calls"] = 0
        cfg = SleepConfig.model_validate(data)
        assert (await run_night(cfg, project=setup.project)).accepted
        live = Docs(skill=read_live(cfg.live_skill_path(setup.project))[0],
                    memory=read_live(cfg.live_memory_path(setup.project))[0])  # fmt: skip
        path = archive_path(project_dir(cfg.state_path(), setup.project))
        conn = sqlite3.connect(path)  # one task keeps a single sample under the live docs
        task = conn.execute(
            "SELECT task_id FROM sample_answers WHERE docs_hash = ? ORDER BY task_id LIMIT 1",
            (live.key,),
        ).fetchone()[0]
        conn.execute(
            "DELETE FROM sample_answers WHERE docs_hash = ? AND task_id = ? AND sample_id >"
            " (SELECT MIN(sample_id) FROM sample_answers WHERE docs_hash = ? AND task_id = ?)",
            (live.key, task, live.key, task),
        )
        conn.commit()
        conn.close()
        failing["on"] = True
        night = await run_night(cfg, project=setup.project)
    assert not night.reason.startswith("quiet night"), night.reason
    assert night.run_dir is not None
    report = json.loads((night.run_dir / "report.json").read_text())
    stages = json.loads((night.run_dir / "run.json").read_text())["stages"]
    recheck = next(s["model_calls"] for s in stages if s["name"] == "recheck")
    assert recheck >= 1  # the re-sample was drawn first
    # the estimate the report keeps is the learning night's, said before learning
    assert report["estimate_detail"]["calls"] > 2 * recheck + 2, report["estimate_detail"]
