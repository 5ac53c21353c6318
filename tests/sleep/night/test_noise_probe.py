"""The noise probe (issue 21.4): a first night's rollouts draw one sample of every task and a
second of a seeded subset; when the subset's pairs agree, the wave is one sample per task
(later waves too), and when any disagrees, every task gets the full K as before."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.outcome import read_live
from skillopt_sleep.night.probe import probe_size, probe_subset
from skillopt_sleep.night.run import NightOutcome, run_night
from skillopt_sleep.replay import Docs
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


def _first_wave(outcome: NightOutcome, cfg: SleepConfig, demo: DemoSetup) -> Counter[str]:
    """Samples per task of the first rollouts wave: the live documents, ids below 1000."""
    assert outcome.run_dir is not None
    start = Docs(skill=read_live(cfg.live_skill_path(demo.project))[0],
                 memory=read_live(cfg.live_memory_path(demo.project))[0])  # fmt: skip
    rows = [json.loads(line) for line in (outcome.run_dir / "rollouts.jsonl").open()]
    return Counter(
        r["task_id"] for r in rows
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
        outcome = await run_night(cfg, project=demo.project)
    assert outcome.accepted, outcome.reason
    drawn = _first_wave(outcome, cfg, demo)
    n = len(drawn)
    assert n >= 2
    assert sum(drawn.values()) == n + min(n, probe_size()) < K * n
    assert max(drawn.values()) == 2
    rollouts = [r for r in _rows(outcome) if r["phase"] == "rollout"]
    later = Counter((r["task_id"], r["skill_hash"], r["memory_hash"]) for r in rollouts)
    assert max(later.values()) <= 2  # later waves (other documents) are one sample each


def _rows(outcome: NightOutcome) -> list[dict[str, Any]]:
    assert outcome.run_dir is not None
    return [json.loads(line) for line in (outcome.run_dir / "rollouts.jsonl").open()]


async def test_a_noisy_model_shows_in_the_probe_and_every_task_gets_k_samples(
    tmp_path: Path,
) -> None:
    """The demo's mock model answers each sample on its own draw: the probe sees pairs
    disagree, and the wave is the full K of every task, as without the probe."""
    demo = prepare_demo(tmp_path)
    cfg = _config(demo)
    outcome = await run_night(cfg, project=demo.project)
    drawn = _first_wave(outcome, cfg, demo)
    assert drawn and set(drawn.values()) == {K}, drawn
    scores: dict[str, list[float]] = {}
    for r in _rows(outcome):
        if r["phase"] == "rollout" and r["sample_id"] < K and not r.get("error"):
            scores.setdefault(r["task_id"], []).append(float(r["hard"]))
    assert any(max(v) - min(v) > 0 for v in scores.values() if all(map(math.isfinite, v)))
