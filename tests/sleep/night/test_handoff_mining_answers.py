"""Issue 32 item 10: an answer to a mining prompt is checked like a judge's: prose, or JSON
that gives a session no tasks, is refused with the reason (set aside, the prompt pending
again), never taken for mined tasks."""

from __future__ import annotations

from pathlib import Path

import pytest

from skillopt.backends.handoff import answer_path, read_pending, write_answer
from skillopt_sleep.demo import prepare_demo
from skillopt_sleep.handoff import as_handoff, handoff_dir
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.night_end import RunStatus
from support.handoff_agent import mined_nothing


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ("The user mostly asks for release notes.", "no JSON in the reply"),
        ('{"sessions": [{"session": "S1", "tasks": "none"}]}', "S1: tasks"),
    ],
    ids=["prose", "a session without its tasks"],
)
async def test_a_mining_answer_that_cannot_be_read_is_refused_with_the_reason(
    tmp_path: Path, answer: str, problem: str
) -> None:
    setup = prepare_demo(tmp_path)
    night = setup.config.night.model_copy(update={"rounds": 1, "llm_mine": True})
    handoff = as_handoff(setup.config.model_copy(update={"night": night}))
    where = handoff_dir(handoff, setup.project)
    assert (await run_night(handoff, project=setup.project)).status is RunStatus.WAITING
    bad, good = read_pending(where)
    assert bad.stage == good.stage == "mine"
    write_answer(where, bad.id, answer)
    write_answer(where, good.id, mined_nothing(good.prompt))
    again = await run_night(handoff, project=setup.project)
    assert again.status is RunStatus.WAITING and again.failed_stage == "harvest"
    (waiting,) = read_pending(where)
    assert waiting.id == bad.id and waiting.problem.startswith("not in the expected format")
    assert problem in waiting.problem
    assert answer_path(where, bad.id).with_suffix(".rejected.md").read_text().strip() == answer
