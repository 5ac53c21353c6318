"""Issue 32 item 7: a handoff night answered sitting by sitting takes the decisions of the
model-driven night given the same answers.

One model that answers every sample of a prompt alike (the lift world, ``bench/lift_world``:
recurring tasks with house conventions, its LLM miner on) drives a night over a loopback
HTTP server; then the same night in handoff mode is answered, sitting by sitting, with that
model's reply to each prompt it lists. Before the fix a handoff night skipped the noise
probe and drew K samples of every task where the model's night, having found its model
consistent, drew one: other rollouts, other reflections and gate samples, other decisions
(here 11 trials and 649 prompts instead of the model's 27 trials and 911 calls, and a rule
staged in SKILL.md that the model's night put in CLAUDE.md; on the audit's lift world 18
trials instead of 20).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from skillopt.backends.handoff import answer_path, read_pending, write_answer
from skillopt_sleep.config import SleepConfig, managed_skill_name
from skillopt_sleep.handoff import as_handoff, bind_handoff, handoff_dir
from skillopt_sleep.night.entry import NightOutcome, NightResult, run_night
from skillopt_sleep.rundir import RunStatus
from support.fake_model_server import FakeModelServer

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from lift import SEED_MEMORY, SEED_SKILL
from lift_world.history import write_history
from lift_world.model import WorldModel

KEY_ENV = "SKILLOPT_TEST_FAKE_KEY"
WORLD_SEED = 2  # a world whose first night takes several rounds and stages both documents
MOST_SITTINGS = 120


def lift_project(root: Path, url: str) -> tuple[SleepConfig, Path]:
    """A small lift history (each task's sessions once or twice, a few one-offs) and the
    seed documents; the config reading it, on one HTTP member serving both roles."""
    home = root / "home"
    project = home / "work" / "shop-api"
    write_history(home, project, now=datetime.now(UTC), seed=WORLD_SEED, per_task=(1, 2),
                  noise=4)  # fmt: skip
    skill = home / ".claude" / "skills" / managed_skill_name(project) / "SKILL.md"
    skill.parent.mkdir(parents=True, exist_ok=True)
    skill.write_text(SEED_SKILL, encoding="utf-8")
    (project / "CLAUDE.md").write_text(SEED_MEMORY, encoding="utf-8")
    cfg = SleepConfig.model_validate({
        "state_dir": str(root / "model-state"),
        "sources": {"claude_home": str(home / ".claude"), "codex_home": str(home / ".codex"),
                    "lookback_hours": 0},
        "pool": {
            "members": [{"kind": "openai", "name": "m", "base_url": url, "model": "lift",
                         "api_key_env": KEY_ENV, "max_concurrency": 8, "timeout": 30}],
            "roles": {"target": ["m"], "optimizer": ["m"]},
            "retry": {"max_attempts": 1, "base_delay": 0.0, "max_delay": 0.0},
        },
    })  # fmt: skip
    return cfg, project


def trials(outcome: NightOutcome) -> list[tuple[Any, ...]]:
    assert outcome.run_dir is not None
    rows = json.loads((outcome.run_dir / "trials.json").read_text())["trials"]
    return [
        (t["name"], t["kind"], t["target"], [(e["target"], e["content"]) for e in t["edits"]],
         t["verdict"], (t.get("decision") or {}).get("accepted"))
        for t in rows
    ]  # fmt: skip


def staged(outcome: NightOutcome) -> dict[str, str]:
    """The staged documents, by the live file each would replace."""
    assert outcome.run_dir is not None
    manifest = json.loads((outcome.run_dir / "proposal" / "manifest.json").read_text())
    return {
        e["live_path"]: (outcome.run_dir / e["proposed_file"]).read_text()
        for e in manifest["entries"]
    }


async def sitting_by_sitting(
    cfg: SleepConfig, project: Path, model: WorldModel
) -> tuple[NightOutcome, int]:
    """The night in handoff mode, each sitting's prompts answered by ``model``; the outcome
    and how many prompts it asked."""
    where = handoff_dir(cfg, project)
    answered = 0
    for _ in range(MOST_SITTINGS):
        outcome = await run_night(cfg, project=project)
        if outcome.status is not RunStatus.WAITING:
            return outcome, answered
        for prompt in read_pending(where):
            write_answer(where, prompt.id, model.answer(prompt.prompt))
            answered += 1
    raise AssertionError(f"still waiting after {MOST_SITTINGS} sittings")


async def in_one_sitting(
    cfg: SleepConfig, project: Path, model: WorldModel
) -> tuple[NightOutcome, int]:
    """The night in handoff mode with ``--wait``, ``model`` answering each prompt as
    ``pending.json`` lists it; the outcome and how many prompts it asked."""
    waiting = bind_handoff(cfg, project, wait=600)
    where = handoff_dir(waiting, project)
    asked: set[str] = set()
    done = anyio.Event()

    async def agent() -> None:
        while not done.is_set():
            for prompt in read_pending(where):
                if prompt.id not in asked and not answer_path(where, prompt.id).exists():
                    write_answer(where, prompt.id, model.answer(prompt.prompt))
                    asked.add(prompt.id)
            await anyio.sleep(0.02)

    async with anyio.create_task_group() as group:
        group.start_soon(agent)
        outcome = await run_night(waiting, project=project)
        done.set()
    return outcome, len(asked)


@pytest.mark.slow
async def test_sitting_by_sitting_a_handoff_night_takes_the_model_nights_decisions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "k")
    model = WorldModel(world_seed=WORLD_SEED)
    with FakeModelServer(reply_fn=model.reply) as server:
        cfg, project = lift_project(tmp_path, server.url("m"))
        reference = await run_night(cfg, project=project)
        calls = len(server.requests)
    assert reference.status is RunStatus.COMPLETE and reference.accepted, reference.reason

    handoff = as_handoff(cfg.model_copy(update={"state_dir": tmp_path / "handoff-state"}))
    outcome, answered = await sitting_by_sitting(handoff, project, model)
    assert outcome.status is RunStatus.COMPLETE, outcome.reason

    assert trials(outcome) == trials(reference)
    assert staged(outcome) == staged(reference)
    assert (outcome.result, outcome.baseline, outcome.candidate) == (
        reference.result, reference.baseline, reference.candidate)  # fmt: skip
    assert answered == calls  # a prompt for each call the model's night made, each asked once


@pytest.mark.slow
async def test_under_a_budget_that_stops_the_night_each_sitting_counts_the_whole_night(
    tmp_path: Path,
) -> None:
    """``budget.max_calls`` bounds the night: a later sitting counts what the earlier ones
    were answered (read back, not asked again), so answered step by step the night stops
    where it stops in one sitting (``--wait``), with the same trials and staged documents.
    Before, each sitting counted only its own answers: the night never reached the cap and
    tried everything (27 trials, where one sitting stops after 8)."""
    model = WorldModel(world_seed=WORLD_SEED)
    cfg, project = lift_project(tmp_path, "http://127.0.0.1:9/unused/v1")
    budget = cfg.budget.model_copy(update={"max_calls": 450})  # the night asks 911 uncapped
    capped = as_handoff(cfg.model_copy(update={"budget": budget}))
    one, _ = await in_one_sitting(
        capped.model_copy(update={"state_dir": tmp_path / "one"}), project, model
    )
    assert one.result is NightResult.BUDGET_REACHED and one.accepted, one.reason
    steps, _ = await sitting_by_sitting(
        capped.model_copy(update={"state_dir": tmp_path / "steps"}), project, model
    )
    assert steps.result is NightResult.BUDGET_REACHED, steps.reason
    assert trials(steps) == trials(one)
    assert staged(steps) == staged(one)
