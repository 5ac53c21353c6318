"""Before any call, the spend estimate reads how the target samples (issue 21.6).

A model that flips answers makes a night ~4x dearer. Before, nothing said before the first
call told the two apart: every first night was estimated as a consistent model's, -75 % off
for a noisy one. The config says it: greedy (temperature 0) answers consistently; a
temperature above zero, the provider's default, an agent CLI or a flipping mock samples.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skillopt.config import load_pool_config
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.sampling_guess import CONSISTENT, NOISY, sampling_guess
from skillopt_sleep.stage_rates import LEARNING, PRIOR_NOISE, NightRecord, tonight_noise
from skillopt_sleep.state import project_dir
from skillopt_sleep.token_model import FILE_NAME
from support.fake_model_server import FakeModelServer
from support.sleep_setup import http_config
from support.world_http import world_reply


def _pool(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "endpoints.toml"
    path.write_text(text)
    return load_pool_config(path, env_prefix=None)


HTTP = 'kind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'


@pytest.mark.parametrize(
    ("members", "target", "kind", "says"),
    [
        ([f'name = "a"\n{HTTP}[members.request]\ntemperature = 0.7\n'
          "[members.request.target]\ntemperature = 0.0\n"], ["a"], CONSISTENT,
         "a sampled at temperature 0"),  # the target's own setting wins over the member's
        ([f'name = "a"\n{HTTP}[members.request.optimizer]\ntemperature = 0.0\n'], ["a"], NOISY,
         "a at the provider's default temperature"),  # a greedy judge says nothing of it
        ([f'name = "a"\n{HTTP}[members.request.target]\ntemperature = 0.8\ntop_p = 0.9\n'],
         ["a"], NOISY, "a sampled at temperature 0.8, top_p 0.9"),
        ([f'name = "a"\n{HTTP}[members.request]\nextra_body = {{ temperature = 0 }}\n'], ["a"],
         CONSISTENT, "a sampled at temperature 0"),
        ([f'name = "a"\n{HTTP}[members.request]\ntemperature = 0\n'
          "extra_body = { temperature = 0.9 }\n"], ["a"], NOISY,
         "a sampled at temperature 0.9"),  # the body sends extra_body's, merged in last
        (['name = "c"\nkind = "claude"\n', f'name = "a"\n{HTTP}[members.request]\n'
          "temperature = 0\n"], ["a", "c"], NOISY, "c: a claude CLI"),
        (['name = "x"\nkind = "mock"\noptions = { flip = 0.2 }\n'], ["x"], NOISY,
         "x: a mock model flipping 20% of its answers"),
        (['name = "x"\nkind = "mock"\n'], ["x"], CONSISTENT, "x: a mock model flipping no"),
    ],
)  # fmt: skip
def test_the_config_says_how_the_target_samples(
    tmp_path: Path, members: list[str], target: list[str], kind: str, says: str
) -> None:
    tables = "".join(f"[[members]]\n{m}\n" for m in members)
    roles = f"[roles]\ntarget = {json.dumps(target)}\noptimizer = {json.dumps(target)}\n"
    guess = sampling_guess(_pool(tmp_path, tables + roles))
    assert guess is not None and guess.kind == kind and says in guess.why, guess


def _night(kind: str, noise: float, sampling: str | None = None) -> NightRecord:
    return NightRecord(kind=kind, tasks=10, noise=noise, sampling=sampling,
                       calls={"trial": 100 if noise < 0.05 else 500})  # fmt: skip


def test_recorded_nights_of_the_same_kind_of_model_win_over_the_prior() -> None:
    greedy, sampled = _night(LEARNING, 0.0, CONSISTENT), _night(LEARNING, 0.25, NOISY)
    # the last learning night was greedy: tonight's sampled model is priced as the sampled one
    assert tonight_noise([sampled, greedy], None, NOISY) == 0.25
    assert tonight_noise([sampled, greedy], None, CONSISTENT) == 0.0
    # none of that kind measured: that kind's prior
    assert tonight_noise([greedy], None, NOISY) == PRIOR_NOISE[NOISY]
    # a sampled model whose answers agreed: what it measured, not the noisy prior
    steady = _night(LEARNING, 0.0, NOISY)
    assert tonight_noise([greedy, steady], None, NOISY) == 0.0
    # nights recorded before the kind was: their measured noise says it
    assert tonight_noise([_night(LEARNING, 0.3), greedy], None, NOISY) == 0.3
    # the archive knows tonight's tasks under tonight's answer key: it wins
    assert tonight_noise([sampled], [0.0, 0.0, 0.0], NOISY) == 0.0


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DemoSetup:
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "test-key-not-secret")
    return prepare_demo(tmp_path)


def _sampled_at(cfg: SleepConfig, temperature: float | None, **budget: int) -> SleepConfig:
    data = cfg.model_dump(mode="json")
    if temperature is not None:
        for member in data["pool"]["members"]:
            member["request"] = {"target": {"temperature": temperature}}
    data["budget"].update(budget)
    return SleepConfig.model_validate(data)


def _report(run_dir: Path | None) -> dict[str, Any]:
    assert run_dir is not None
    report: dict[str, Any] = json.loads((run_dir / "report.json").read_text())
    return report


async def test_the_estimate_before_any_call_follows_the_targets_sampling(
    setup: DemoSetup,
) -> None:
    """Before: the same consistent prior for all three (no word of noise)."""
    said: dict[float | None, dict[str, Any]] = {}
    with FakeModelServer(reply_fn=world_reply) as server:
        for temperature in (0.0, 0.8, None):  # None: the provider's default
            cfg = _sampled_at(http_config(setup, server, llm_mine=False), temperature,
                              max_calls=1)  # fmt: skip
            outcome = await run_night(cfg, project=setup.project, dry_run=True)
            report = _report(outcome.run_dir)
            said[temperature] = {**report["estimate_detail"], "line": report["estimate"]}
            (project_dir(cfg.state_path(), setup.project) / FILE_NAME).unlink(missing_ok=True)
    greedy, sampled, default = said[0.0], said[0.8], said[None]
    assert greedy["noise_basis"] == sampled["noise_basis"] == default["noise_basis"] == "config"
    assert greedy["noise"] == 0.0 and sampled["noise"] == default["noise"] == PRIOR_NOISE[NOISY]
    assert sampled["calls"] > 3 * greedy["calls"] and default["calls"] == sampled["calls"]
    assert "m1, m2 sampled at temperature 0 (consistent until measured)" in greedy["line"]
    assert "m1, m2 sampled at temperature 0.8 (noisy until measured)" in sampled["line"]
    assert "default temperature (noisy until measured)" in default["line"]


async def test_a_sampled_model_that_answers_consistently_is_revised_down_then_learned(
    setup: DemoSetup,
) -> None:
    """The HTTP world answers the same whatever the temperature: the noisy guess is revised
    after the first rollouts, the night is recorded as a sampled model's, and the next
    night of that model is estimated from it."""
    with FakeModelServer(reply_fn=world_reply) as server:
        cfg = _sampled_at(http_config(setup, server, llm_mine=False), 0.8)
        first = await run_night(cfg, project=setup.project, dry_run=True)
        report = _report(first.run_dir)
        detail = report["estimate_detail"]
        revised = detail["revised"]
        assert revised["noise"] == 0.0 and revised["calls"] < detail["calls"] / 3
        line = next(n for n in report["notes"] if n.startswith("revised estimate"))
        assert f"about {revised['calls']} model calls in all (was {detail['calls']})" in line
        second = await run_night(cfg, project=setup.project, dry_run=True)
    again = _report(second.run_dir)
    detail, spent = again["estimate_detail"], again["spend"]["calls"]
    assert detail["noise_basis"] == "config" and detail["noise"] == 0.0
    assert "sampled at temperature 0.8, 0% as such a model's last night" in again["estimate"]
    assert abs(detail["calls"] - spent) <= 0.3 * spent and "revised" not in detail


async def test_the_archives_answers_win_over_the_configs_guess(setup: DemoSetup) -> None:
    """The demo's mock flips no answer (consistent by its config), but its world's answers
    disagree across samples: once the archive recorded them, tonight's noise is theirs."""
    first = await run_night(setup.config, project=setup.project)
    assert _report(first.run_dir)["estimate_detail"]["noise_basis"] == "config"
    (project_dir(setup.config.state_path(), setup.project) / FILE_NAME).unlink()
    second = await run_night(setup.config, project=setup.project)
    report = _report(second.run_dir)
    detail = report["estimate_detail"]
    assert detail["noise_basis"] == "archive" and detail["noise"] > 0.3
    assert "noise: the archive's answers to these tasks" in report["estimate"]
