"""The noise probe (issue 21.4): a first night's rollouts draw one sample of every task and a
second of a seeded subset; when the subset's pairs agree, the wave is one sample per task
(later waves too), and when any disagrees, every task gets the full K as before."""

from __future__ import annotations

import json
import math
import sqlite3
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from skillopt.backends.handoff import read_pending
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.handoff import as_handoff, handoff_dir
from skillopt_sleep.night.entry import NightOutcome, run_night
from skillopt_sleep.night.outcome import read_live
from skillopt_sleep.night.quiet.probe import probe_size, probe_subset
from skillopt_sleep.replay import Docs
from skillopt_sleep.rundir import RunStatus
from skillopt_sleep.state import project_dir
from skillopt_sleep.tasks.archive import archive_path, open_archive
from skillopt_sleep.tasks.records import Question, SampleAnswer
from support.fake_model_server import FakeModelServer
from support.world_http import world_reply

K = 3  # more than two: a consistent wave then saves calls on the probed tasks too


def _config(demo: DemoSetup, url: str | None = None) -> SleepConfig:
    data = demo.config.model_dump(mode="json")
    data["night"].update(dream_rollouts=K, drift_check_calls=0)
    if url is not None:  # the world over real HTTP: it answers every sample alike
        data["night"]["llm_mine"] = False
        data["pool"] = {
            "members": [{"kind": "openai", "name": "m", "base_url": url, "model": "fake",
                         "api_key_env": "SKILLOPT_TEST_FAKE_KEY", "max_concurrency": 8,
                         "timeout": 10}],
            "roles": {"target": ["m"], "optimizer": ["m"]},
            "retry": {"max_attempts": 1, "base_delay": 0.0, "max_delay": 0.0},
        }  # fmt: skip
    return SleepConfig.model_validate(data)


def _live(cfg: SleepConfig, demo: DemoSetup) -> Docs:
    return Docs(skill=read_live(cfg.live_skill_path(demo.project))[0],
                memory=read_live(cfg.live_memory_path(demo.project))[0])  # fmt: skip


def _rows(outcome: NightOutcome) -> list[dict[str, Any]]:
    assert outcome.run_dir is not None
    return [json.loads(line) for line in (outcome.run_dir / "rollouts.jsonl").open()]


def _first_wave(outcome: NightOutcome, start: Docs) -> Counter[str]:
    """Samples per task of the first rollouts wave: ``start`` (the live documents), ids
    below 1000."""
    return Counter(
        r["task_id"] for r in _rows(outcome)
        if r["phase"] == "rollout" and r["sample_id"] < 1000
        and f"{r['skill_hash']}.{r['memory_hash']}" == start.key
    )  # fmt: skip


def test_the_probe_catches_a_ten_percent_flip_rate_nineteen_times_in_twenty() -> None:
    n = probe_size()
    assert n == 16
    differ = 2 * 0.1 * 0.9  # two samples of a task disagree
    assert (1 - differ) ** n <= 0.05 < (1 - differ) ** (n - 1)
    ids = [f"t{i:02d}" for i in range(40)]
    chosen = probe_subset(ids, seed=42, salt="docs:0")
    assert len(chosen) == n and set(chosen) <= set(ids)
    assert chosen == probe_subset(list(reversed(ids)), seed=42, salt="docs:0")  # resumable
    assert chosen != probe_subset(ids, seed=42, salt="other:0")
    assert probe_subset(ids[:5], seed=42, salt="docs:0") == ids[:5]  # few tasks: all


@pytest.mark.slow
async def test_a_consistent_model_draws_one_sample_per_task_and_the_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: K samples of every task (48 for 16 tasks); now N plus the probe's second
    samples, and the night still learns."""
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "k")
    demo = prepare_demo(tmp_path)
    with FakeModelServer(reply_fn=world_reply) as server:
        cfg = _config(demo, server.url("m"))
        start = _live(cfg, demo)
        outcome = await run_night(cfg, project=demo.project)
    assert outcome.accepted, outcome.reason
    drawn = _first_wave(outcome, start)
    n = len(drawn)
    assert n >= 2
    assert sum(drawn.values()) == n + min(n, probe_size()) < K * n
    assert max(drawn.values()) == 2
    rollouts = [r for r in _rows(outcome) if r["phase"] == "rollout"]
    later = Counter((r["task_id"], r["skill_hash"], r["memory_hash"]) for r in rollouts)
    assert max(later.values()) <= 2  # later waves (other documents) are one sample each


class SecondThoughtJudge:
    """The world over HTTP, with a judge that scores an answer it has graded before a
    quarter point higher (a judge asked the same again, after a fault say, need not repeat
    itself); the model's answers are the same every time."""

    def __init__(self) -> None:
        self.graded: Counter[str] = Counter()

    def reply(self, request: Any) -> str:
        text = world_reply(request)
        if "# What a good answer does" not in request.user_text:
            return text
        self.graded[request.user_text] += 1
        if self.graded[request.user_text] == 1:
            return text
        verdict = json.loads(text)
        verdict["score"] = min(1.0, float(verdict["score"]) + 0.25)
        return json.dumps(verdict)


async def test_the_judge_scoring_one_answer_two_ways_is_not_the_models_noise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's pairs repeat the model's answers; only the judge's second look differs.
    The model is consistent: one sample per task, as with a judge that repeats itself."""
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "k")
    demo = prepare_demo(tmp_path)
    judge = SecondThoughtJudge()
    with FakeModelServer(reply_fn=judge.reply) as server:
        cfg = _config(demo, server.url("m"))
        start = _live(cfg, demo)
        outcome = await run_night(cfg, project=demo.project)
    assert max(judge.graded.values()) >= 2  # the judge did grade an answer twice
    drawn = _first_wave(outcome, start)
    n = len(drawn)
    assert sum(drawn.values()) == n + min(n, probe_size()) < K * n


async def test_a_noisy_model_shows_in_the_probe_and_every_task_gets_k_samples(
    tmp_path: Path,
) -> None:
    """The demo's mock model answers each sample on its own draw: the probe sees pairs
    disagree, and the wave is the full K of every task, as without the probe."""
    demo = prepare_demo(tmp_path)
    cfg = _config(demo)
    start = _live(cfg, demo)
    outcome = await run_night(cfg, project=demo.project)
    drawn = _first_wave(outcome, start)
    assert drawn and set(drawn.values()) == {K}, drawn
    scores: dict[str, list[float]] = {}
    for r in _rows(outcome):
        if r["phase"] == "rollout" and r["sample_id"] < K and not r.get("error"):
            scores.setdefault(r["task_id"], []).append(float(r["hard"]))
    assert any(max(v) - min(v) > 0 for v in scores.values() if all(map(math.isfinite, v)))


async def test_tasks_the_archive_saw_steady_draw_one_sample_and_a_noisy_one_draws_k(
    tmp_path: Path,
) -> None:
    """After a night that staged and adopted documents (sampled enough to be steady), one
    task's record gets a disagreeing sample: that night is no quiet one, its noisy task
    draws the full K and every task the archive saw steady under the live documents one."""
    demo = prepare_demo(tmp_path)
    data = demo.config.model_dump(mode="json")
    data["auto_adopt"] = True
    data["night"]["drift_check_calls"] = 0
    cfg = SleepConfig.model_validate(data)
    first = await run_night(cfg, project=demo.project)
    assert first.accepted
    live = _live(cfg, demo)
    path = archive_path(project_dir(cfg.state_path(), demo.project))
    conn = sqlite3.connect(path)
    row = conn.execute(
        "SELECT task_id, task_hash, docs_hash, answer_key FROM sample_answers"
        " WHERE docs_hash = ? LIMIT 1", (live.key,),
    ).fetchone()  # fmt: skip
    conn.close()
    noisy = Question(task_id=row[0], task_hash=row[1], docs_hash=row[2], answer_key=row[3])
    with open_archive(path) as archive:
        assert archive.noise([noisy])[noisy].steady
        archive.record_answers([SampleAnswer(question=noisy, sample_id=7, score=0.0)],
                               night=99, run_id="a-noisy-draw", now=datetime.now(UTC))  # fmt: skip
    second = await run_night(cfg, project=demo.project)
    assert not second.reason.startswith("quiet night"), second.reason
    drawn = _first_wave(second, live)
    k = max(cfg.night.dream_rollouts, cfg.gate.samples_per_task)
    assert drawn[noisy.task_id] == k
    others = {t: n for t, n in drawn.items() if t != noisy.task_id}
    assert others and set(others.values()) == {1}, drawn


async def test_a_handoff_night_asks_the_probes_wave_in_its_first_sitting(tmp_path: Path) -> None:
    """A handoff night probes as the model's night does (issue 32 item 7: without the probe
    it drew other samples, and took other decisions): its first sitting asks one sample of
    every task and a second of the probed ones, and waits for them before the verdict."""
    demo = prepare_demo(tmp_path)
    base = _config(demo)
    night = base.night.model_copy(update={"llm_mine": False})  # the mock cannot mine
    cfg = as_handoff(base.model_copy(update={"night": night, "state_dir": tmp_path / "state"}))
    outcome = await run_night(cfg, project=demo.project)
    assert outcome.status is RunStatus.WAITING and outcome.failed_stage == "rollouts"
    asked = Counter(p.stage for p in read_pending(handoff_dir(cfg, demo.project)))
    n = outcome.n_tasks
    assert asked["rollout"] == n + min(n, probe_size()) < K * n, asked
