"""A child night (a project skill's, the shared memory step's) learns on its parent's budget:
the calls it makes count against the parent's cap, the budget check stops it when the
parent's cap is reached, and the reserve it holds back for its final check is held back
from the budget its siblings spend from too."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from skillopt.backends.base import Completion, CompletionRequest, Role, Usage
from skillopt.errors import BudgetExceededError
from skillopt_sleep.config import BudgetSettings, SleepConfig
from skillopt_sleep.night.learn.budget_plan import calls_left
from skillopt_sleep.night.night_state import Night
from skillopt_sleep.night.skills.fanout import Fanout
from skillopt_sleep.rundir import RunDir, utc_now


class Answers:
    """A pool at the seam: every call answered at once, each request kept."""

    def __init__(self) -> None:
        self.requests: list[CompletionRequest] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        return Completion(text="ok", usage=Usage(prompt_tokens=10, completion_tokens=5),
                          member="s", latency=0.0)  # fmt: skip

    def accounting(self) -> dict[str, Any]:
        return {}

    def total_concurrency(self, role: Role) -> int:
        return 1


class Progress:
    def stage(self, name: str) -> None: ...

    def calls_planned(self, n: int) -> None: ...

    def call_done(self, *, ok: bool = True, stage: str = "", cached: bool = False) -> None: ...

    def note(self, message: str) -> None: ...

    def close(self) -> None: ...


def _parent(tmp_path: Path, pool: Answers, max_calls: int) -> Night:
    cfg = SleepConfig(budget=BudgetSettings(max_calls=max_calls))
    run = RunDir.create(
        tmp_path / "runs", now=utc_now(), project=str(tmp_path), project_key="p",
        config=cfg.snapshot(), config_hash=cfg.fingerprint(), dry_run=False,
    )  # fmt: skip
    return Night(config=cfg, project=tmp_path, pool=pool, run=run, clock=utc_now,
                 progress=Progress(), dry_run=False, resumed=False)  # fmt: skip


def _family(tmp_path: Path, max_calls: int) -> tuple[Answers, Night, list[Night]]:
    """A parent night capped at ``max_calls`` over ``pool``, and two child nights of it."""
    pool = Answers()
    parent = _parent(tmp_path, pool, max_calls=max_calls)
    fan = Fanout(night=parent, memory="", night_no=1, managed_tasks=[])
    skill = tmp_path / "SKILL.md"
    return (
        pool,
        parent,
        [
            fan.child_night(tmp_path / "skills" / name, name, skill_path=skill, evolve_skill=True)
            for name in ("one", "two")
        ],
    )


REQUEST = CompletionRequest(role=Role.TARGET, prompt="p", stage="rollout")


async def test_children_spend_from_the_parents_cap_and_its_check_stops_them(
    tmp_path: Path,
) -> None:
    pool, parent, (one, two) = _family(tmp_path, max_calls=5)
    for _ in range(3):
        await one.spend.complete(REQUEST)
    await two.spend.complete(REQUEST)
    await two.spend.complete(REQUEST)
    with pytest.raises(BudgetExceededError):
        await one.spend.complete(REQUEST)
    # the parent's cap holds across the children: the sixth call was never sent
    assert parent.spend.calls == 5 and len(pool.requests) == 5 and two.spend.calls == 2
    for child in (one, two):  # and their learning stops on it, naming the cap
        with pytest.raises(BudgetExceededError, match=r"budget\.max_calls = 5 reached"):
            child.learning.check_budget("round1.trial_skill")
        assert calls_left(child.learning.budget) == 0


async def test_a_childs_reserve_is_held_back_from_its_siblings_until_it_lets_go(
    tmp_path: Path,
) -> None:
    _, parent, (one, two) = _family(tmp_path, max_calls=6)
    await one.spend.complete(REQUEST)
    with ExitStack() as first, ExitStack() as second:
        first.enter_context(one.learning.budget.holding_back(3, 0))  # one's final check
        second.enter_context(two.learning.budget.holding_back(1, 0))  # two's, at once
        assert calls_left(two.learning.budget) == 1
        await two.spend.complete(REQUEST)
        with pytest.raises(BudgetExceededError, match="less the reserve held back"):
            await two.spend.complete(REQUEST)
        first.close()  # one lets go first: two's reserve is still held
        assert parent.spend.max_calls == 5 and parent.spend.holding
    assert parent.spend.max_calls == 6 and not parent.spend.holding
    await two.spend.complete(REQUEST)  # the reserve is there to be spent
    assert parent.spend.calls == 3
