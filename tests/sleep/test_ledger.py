"""The night's ledger: what each call bought, from the endpoint's usage to report.json.

A night runs against the fake OpenAI server on 127.0.0.1 playing the demo world, the server
reporting usage as a provider does, with the prompt tokens its prefix cache would have
served (``usage.prompt_tokens_details.cached_tokens``). What the server counted must be
what report.json, diagnostics.json and run.json say: model calls counted once each, the
replies the response cache served apart.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pytest

from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.ledger import SampleCost, build_ledger, no_decision_calls, repeat_calls
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.rundir import RunStatus
from support.fake_model_server import FakeModelServer, Reply, Request
from support.prompt_cache import PromptCache, prompt_text
from support.sleep_setup import http_config
from support.world_http import world_reply


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DemoSetup:
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "test-key-not-secret")
    return prepare_demo(tmp_path)


class CachingProvider:
    """A reply rule: the demo world's answer, with usage and cached prompt tokens."""

    def __init__(self) -> None:
        self.cache = PromptCache(block_tokens=16, min_tokens=64)
        self.lock = threading.Lock()
        self.seen: Counter[str] = Counter()

    def __call__(self, request: Request) -> Reply:
        usage = self.cache.usage(prompt_text(request.body))
        with self.lock:
            self.seen["calls"] += 1
            self.seen["prompt"] += usage.prompt_tokens
            self.seen["cached"] += usage.cached_tokens
        return Reply(
            text=world_reply(request),
            usage=(usage.prompt_tokens, 5),
            cached_tokens=usage.cached_tokens,
        )


class StageLines:
    """A progress display's stage lines: model calls and cache hits per stage."""

    def __init__(self) -> None:
        self.current = ""
        self.calls: Counter[str] = Counter()
        self.cache_hits: Counter[str] = Counter()

    def stage(self, name: str) -> None:
        self.current = name

    def calls_planned(self, n: int) -> None:
        pass

    def call_done(self, *, ok: bool = True, stage: str = "", cached: bool = False) -> None:
        (self.cache_hits if cached else self.calls)[self.current] += 1

    def note(self, message: str) -> None:
        pass

    def close(self) -> None:
        pass


async def test_the_ledger_shows_what_the_endpoint_counted(setup: DemoSetup) -> None:
    provider = CachingProvider()
    lines = StageLines()
    with FakeModelServer(rule=provider) as server:
        config = http_config(setup, server, folds=2)
        outcome = await run_night(config, project=setup.project, progress=lines)
    assert outcome.status is RunStatus.COMPLETE
    seen = provider.seen
    assert seen["cached"] > 0  # the instructions and documents lead, so prefixes repeat
    report = json.loads((outcome.run_dir / "report.json").read_text())
    diagnostics = json.loads((outcome.run_dir / "diagnostics.json").read_text())
    ledger = report["ledger"]
    assert diagnostics["ledger"] == ledger
    assert (ledger["calls"], ledger["prompt_tokens"], ledger["cached_tokens"]) == (
        seen["calls"],
        seen["prompt"],
        seen["cached"],
    )
    assert ledger["cached_share"] == round(seen["cached"] / seen["prompt"], 4)
    stages = ledger["stages"]
    # each decision stage's samples: their attempt and judge calls, tokens, cached tokens
    decisions = ledger["decisions"]
    assert sum(d["cached_tokens"] for d in decisions.values()) <= seen["cached"]
    paid = sum(stages[s]["tokens"] for s in decisions) + stages["judge"]["tokens"]
    assert sum(d["tokens"] for d in decisions.values()) == paid
    # stage counts are model calls; the replies the response cache served are apart
    assert sum(row["calls"] for row in stages.values()) == seen["calls"]
    assert report["spend"]["calls_by_stage"] == {k: r["calls"] for k, r in stages.items()}
    assert ledger["cache_hits"] == sum(row["cache_hits"] for row in stages.values()) > 0
    run = json.loads((outcome.run_dir / "run.json").read_text())
    assert sum(s.get("model_calls", 0) for s in run["stages"]) == seen["calls"]
    assert sum(s.get("cache_hits", 0) for s in run["stages"]) == ledger["cache_hits"]
    # the live display's stage lines count the same calls, mining in the harvest included
    assert stages["mine"]["calls"] > 0
    assert dict(lines.calls) == {
        s["name"]: s["model_calls"] for s in run["stages"] if s["model_calls"]
    }
    assert sum(lines.cache_hits.values()) == ledger["cache_hits"]
    markdown = (outcome.run_dir / "report.md").read_text()
    assert f"prompt cache: {seen['cached']} (" in markdown
    html = (outcome.run_dir / "report.html").read_text()
    assert f"{seen['cached']} prompt token(s) served from the provider" in html


def _sample(stage: str, task: str, docs: str, k: int, score: float, **kw: int) -> SampleCost:
    return SampleCost(
        stage=stage,
        task_id=task,
        docs=docs,
        sample_id=k,
        score=(score, score),
        attempt_calls=kw.get("attempt", 1),
        judge_calls=kw.get("judge", 1),
        tokens=100 * (kw.get("attempt", 1) + kw.get("judge", 1)),
    )


def test_repeat_samples_of_a_settled_task_changed_no_decision() -> None:
    samples = [
        # t1 scored alike under both documents on every sample: only each arm's first counts
        *(_sample("trial", "t1", docs, k, 1.0) for docs in ("a", "b") for k in range(3)),
        # t2's arms disagree: every sample is evidence
        *(_sample("trial", "t2", "a", k, 1.0) for k in range(3)),
        *(_sample("trial", "t2", "b", k, 0.0) for k in range(3)),
        # a repeat the response cache answered (judge included) cost nothing
        _sample("rollout", "t3", "a", 0, 0.5),
        _sample("rollout", "t3", "a", 1, 0.5, attempt=0, judge=0),
        _sample("rollout", "t3", "a", 2, 0.5, judge=0),
        # the rollout stage pairs nothing: a later round's documents settle on their own
        *(_sample("rollout", "t3", "b", k, 1.0) for k in range(2)),
    ]
    decided = no_decision_calls(samples)
    assert decided["trial"] == Counter(
        samples=12, calls=24, tokens=2400, no_decision=8, no_decision_tokens=800
    )
    assert decided["rollout"] == Counter(
        samples=5, calls=7, tokens=700, no_decision=3, no_decision_tokens=300
    )
    assert decided["by_stage"] == Counter(trial=4, judge=5, rollout=2)


def test_a_failed_sample_never_settles_a_task_nor_counts() -> None:
    failed = SampleCost(
        stage="union", task_id="t", docs="a", sample_id=1, score=(0.0, 0.0),
        attempt_calls=1, judge_calls=0, failed=True,
    )  # fmt: skip
    samples = [_sample("union", "t", "a", 0, 1.0), failed, _sample("union", "t", "a", 2, 1.0)]
    ledger = build_ledger({"calls": 5, "stages": {"union": {"calls": 3}}}, samples)
    assert ledger["decisions"]["union"] == {
        "samples": 3,
        "calls": 5,
        "tokens": 400,
        "cached_tokens": 0,
        "no_decision": 2,
        "no_decision_tokens": 200,
    }
    assert ledger["stages"]["union"]["no_decision"] == 1 and ledger["no_decision"] == 2


def test_on_a_consistent_night_a_repeated_task_and_documents_could_not_change_a_decision() -> None:
    """Issue 30, lever 6: the ledger per stage counted only repeats within a stage that all
    scored alike; a union or final re-asking the baseline's (task, documents) the rollouts
    had answered was not seen as waste, whatever it scored."""
    samples = [
        _sample("rollout", "t1", "live", 0, 0.0),
        _sample("trial", "t1", "live", 1000, 0.0),  # the baseline arm again: a repeat
        _sample("trial", "t1", "cand", 1000, 1.0),  # the candidate arm: new documents
        _sample("union", "t1", "live", 2000, 0.0, judge=0),  # the judge's verdict was cached
        _sample("union", "t1", "cand", 2000, 1.0),  # the candidate again: a repeat
        _sample("steady", "t1", "cand", 3000, 1.0),  # drawn for later nights: exempt
        _sample("final", "t2", "live", 0, 1.0),
    ]
    spend = {"calls": 12, "stages": {s: {"calls": 2} for s in ("rollout", "trial", "union")}}
    assert repeat_calls(samples, consistent=True) == Counter(trial=1, union=2, judge=2)
    ledger = build_ledger(spend, samples, consistent=True)
    assert ledger["repeats"] == 5
    assert {name: row["repeats"] for name, row in ledger["stages"].items()} == {
        "rollout": 0, "trial": 1, "union": 2,
    }  # fmt: skip
    # a noisy night, or one the probe never judged: a repeat may answer otherwise
    assert repeat_calls(samples, consistent=False) == Counter()
    assert build_ledger(spend, samples)["repeats"] == 0


@pytest.mark.slow
async def test_a_consistent_nights_report_shows_the_calls_that_could_not_change_a_decision(
    setup: DemoSetup,
) -> None:
    with FakeModelServer(reply_fn=world_reply) as server:
        data = http_config(setup, server, llm_mine=False).model_dump(mode="json")
        for member in data["pool"]["members"]:
            member["request"] = {"target": {"temperature": 0}}
        config = SleepConfig.model_validate(data)
        outcome = await run_night(config, project=setup.project)
    assert outcome.status is RunStatus.COMPLETE
    report = json.loads((outcome.run_dir / "report.json").read_text())
    ledger = report["ledger"]
    assert ledger["repeats"] > 0  # the baseline arm is drawn again in every trial
    assert ledger["repeats"] == sum(row["repeats"] for row in ledger["stages"].values())
    assert ledger["repeats"] <= ledger["calls"]
    markdown = (outcome.run_dir / "report.md").read_text()
    assert f"calls that could not change a decision: {ledger['repeats']} (" in markdown
