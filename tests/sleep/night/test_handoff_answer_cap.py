"""Issue 32 item 9: an answer file has a size cap, and what an oversized answer used to set
off cannot happen: the answer is refused unread (named, with the cap), and a handoff
sitting the budget stops while a prompt still waits ends as budget-reached, never with
a ``WaitingForAnswersError`` escaping the night (a traceback, exit 1 instead of 75/0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from skillopt.backends.base import Completion, CompletionRequest, Role
from skillopt.backends.handoff import (
    PROMPTS_NAME,
    HandoffBackend,
    answer_cap,
    answer_path,
    prompt_id,
    read_pending,
)
from skillopt.backends.open import open_completer
from skillopt.backends.pool import BackendPool, MemberSpec
from skillopt.errors import AnswerPendingError, BudgetExceededError
from skillopt_sleep.demo import prepare_demo
from skillopt_sleep.handoff import as_handoff, take_answer
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.night_end import NightResult, RunStatus


def attempt() -> CompletionRequest:
    return CompletionRequest(role=Role.TARGET, prompt="Fix the bug.", max_output_tokens=300)


async def test_an_answer_over_the_cap_is_refused_unread_naming_file_and_cap(
    tmp_path: Path,
) -> None:
    request = attempt()
    pid = prompt_id(request)
    path = answer_path(tmp_path, pid)
    path.parent.mkdir(parents=True)
    cap = answer_cap(300)
    assert 64 * 1024 < cap < 128 * 1024
    path.write_bytes(b"x" * (cap + 1))
    member = HandoffBackend(name="handoff", directory=tmp_path)
    with pytest.raises(AnswerPendingError) as caught:
        await member.complete(request)
    problem = caught.value.problem
    assert f"answers/{pid}.md" in problem and f"{cap}-byte cap" in problem
    assert not path.exists() and path.with_suffix(".rejected.md").stat().st_size == cap + 1
    await member.aclose()
    (pending,) = read_pending(tmp_path)
    assert pending.problem == problem
    assert f"{cap}-byte cap" in (tmp_path / PROMPTS_NAME).read_text()
    path.write_bytes(b"x" * cap)  # at the cap: taken
    assert len((await HandoffBackend(name="h", directory=tmp_path).complete(request)).text) == cap


async def test_an_answer_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    request = attempt()
    path = answer_path(tmp_path, prompt_id(request))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\xff\xfe\x00 not text")
    with pytest.raises(AnswerPendingError, match="not UTF-8"):
        await HandoffBackend(name="handoff", directory=tmp_path).complete(request)


async def test_take_answer_refuses_an_answer_over_the_cap(tmp_path: Path) -> None:
    member = HandoffBackend(name="handoff", directory=tmp_path)
    with pytest.raises(AnswerPendingError):
        await member.complete(attempt())
    await member.aclose()
    (pending,) = read_pending(tmp_path)
    with pytest.raises(ValueError, match="cap"):
        take_answer(tmp_path, pending.id, "x" * (answer_cap(300) + 1))
    assert not answer_path(tmp_path, pending.id).exists()


class _BudgetAfterPending:
    """A handoff-like member: the first mining prompt waits for its answer, every later
    call finds the budget spent (the 13-million-token answer of the issue, in effect)."""

    name = model = "handoff"

    def __init__(self) -> None:
        self.asked = 0

    async def complete(self, request: CompletionRequest) -> Completion:
        self.asked += 1
        if self.asked == 1:
            raise AnswerPendingError("waits", prompt_id=prompt_id(request), member=self.name)
        raise BudgetExceededError("budget.max_tokens = 4000000 reached")

    async def aclose(self) -> None:
        return None


async def test_a_sitting_the_budget_stops_with_a_prompt_waiting_ends_budget_reached(
    tmp_path: Path,
) -> None:
    setup = prepare_demo(tmp_path)
    night = setup.config.night.model_copy(update={"rounds": 1, "llm_mine": True})
    handoff = as_handoff(setup.config.model_copy(update={"night": night}))
    spec = MemberSpec(backend=_BudgetAfterPending(), max_concurrency=1)
    pool = BackendPool({Role.TARGET: [spec], Role.OPTIMIZER: [spec]})
    async with open_completer(pool) as stack:
        outcome = await run_night(handoff, project=setup.project, pool=stack)
    assert outcome.status is RunStatus.COMPLETE
    assert outcome.result is NightResult.BUDGET_REACHED and "max_tokens" in outcome.reason
