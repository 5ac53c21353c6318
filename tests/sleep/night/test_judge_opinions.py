"""A judge seen to contradict itself is asked again about the pairs the candidate changed.

On a night whose model answers the same every time, a comparison is one pair per task and
each answer is judged once. A judge that errs now and then (the same answer scored two
ways) then moves a task by one mistaken verdict, or hides a move. Once the replayer has
heard the judge contradict itself, both answers of every pair whose answers differ are
judged until two verdicts of three agree, and that verdict scores each; the answers are
not asked again. Driven through the real pool with a
scripted member that is the target and the judge.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from skillopt.backends.base import Completion, CompletionRequest, Usage
from skillopt.backends.pool import BackendPool
from skillopt.backends.wrappers import BudgetCompleter
from skillopt.errors import AnswerPendingError, RetryableBackendError
from skillopt.gate import GateConfig
from skillopt.types import ReferenceKind, RolloutResult, TaskRecord
from skillopt_sleep.night.learn.measure import LearnSettings, Measure
from skillopt_sleep.night.learn.pairs import compare
from skillopt_sleep.reflect import ReflectOutcome
from skillopt_sleep.replay import JUDGE_ERROR, OPINION, Docs, Job, Replayer
from support.pools import scripted_pool

RULE = "Name the function and the file it lives in."
TASKS = [
    TaskRecord(id=f"{kind}{i}", intent=f"{kind} task {i}", reference="names the file",
               reference_kind=ReferenceKind.RUBRIC)
    for kind in ("a", "c") for i in range(3)
]  # fmt: skip
START = Docs(skill="# Skill\n", memory="")
WITH_RULE = Docs(skill=f"# Skill\n- {RULE}\n", memory="")

Errs = Callable[[str, str, int], bool]
"""``errs(task id, answer, judge sample id)``: whether this verdict is the wrong one."""


class World:
    """Tasks ``a*`` are done once the rule is in the skill; ``c*`` never are (the rule
    changes their answer, not its worth). The judge scores a done answer 1 and any other
    0, except where ``errs`` says it is wrong."""

    name = "scripted"
    model = "scripted-world"

    def __init__(self, errs: Errs, *, judge_down: bool = False, pending: bool = False) -> None:
        self.errs, self.judge_down, self.pending = errs, judge_down, pending
        self.calls: Counter[str] = Counter()

    async def aclose(self) -> None:
        return None

    async def complete(self, request: CompletionRequest) -> Completion:
        meta = request.metadata
        stage, task = str(meta["stage"]), str(meta["task"]["id"])
        self.calls[stage] += 1
        if stage == "judge":
            if self.judge_down and request.sample_id >= OPINION:
                raise RetryableBackendError("scripted 503", kind="server", member=self.name)
            if self.pending and request.sample_id >= OPINION:
                raise AnswerPendingError(prompt_id="p-judge", member=self.name)
            answer = str(meta["response"])
            right = 1.0 if answer.startswith("done") else 0.0
            score = 1.0 - right if self.errs(task, answer, request.sample_id) else right
            text = json.dumps({"score": score, "reason": "scripted"})
        else:
            ruled = RULE in str(meta.get("skill", ""))
            if ruled:
                text = f"done: {task}" if task.startswith("a") else f"not sure where {task} is"
            else:
                text = f"not sure about {task}"
        return Completion(text=text, usage=Usage.estimate(request.prompt, text),
                          member=self.name, latency=0.0)  # fmt: skip


def _pool(world: World) -> BackendPool:
    return scripted_pool(world, cache=True, concurrency=4)  # a night's pool has the cache


async def _no_reflection(*_: Any) -> ReflectOutcome:
    raise AssertionError("nothing here reflects")


def _measure(pool: BackendPool) -> Measure:
    spend = BudgetCompleter(pool)
    measure = Measure(
        gate=GateConfig(), replayer=Replayer(pool=spend, marker="[skillopt]"), spend=spend,
        reflect=_no_reflection, settings=LearnSettings(rounds=1, folds=2, dream_rollouts=1),
    )  # fmt: skip
    measure.noise.probed(True)  # the probe found the model consistent
    return measure


def _c1_misjudged(task: str, answer: str, sample_id: int) -> bool:
    """The judge passes c1's answer without the rule at samples 0 and 200."""
    return task == "c1" and "about" in answer and sample_id in (0, 200)


async def _once_then_three(world: World) -> tuple[RolloutResult, RolloutResult]:
    """c1's answer without the rule judged once, then with three opinions."""
    job = Job(task=TASKS[4], docs=START, sample_id=0, phase="trial", fresh=True)
    async with _pool(world) as pool:
        replayer = Replayer(pool=pool, marker="[skillopt]")
        (once,) = await replayer.run([job])
        (thrice,) = await replayer.run([_with_opinions(job, 3)])
    assert thrice.response == once.response  # the answer is read back, never asked again
    return once, thrice


async def test_more_opinions_read_the_answer_back_and_take_the_middle_verdict() -> None:
    world = World(_c1_misjudged)
    once, thrice = await _once_then_three(world)
    assert once.hard == 1.0  # the judge's mistake
    assert thrice.hard == 0.0 and not thrice.error
    assert world.calls == {"attempt": 1, "judge": 3}


async def test_the_judge_is_heard_contradicting_itself_only_once_it_has() -> None:
    world = World(_c1_misjudged)
    job = Job(task=TASKS[4], docs=START, sample_id=0, phase="trial", fresh=True)
    async with _pool(world) as pool:
        replayer = Replayer(pool=pool, marker="[skillopt]")
        await replayer.run([job, Job(task=TASKS[5], docs=START, sample_id=0, fresh=True)])
        assert not replayer.judge_noise  # one verdict an answer: nothing contradicted
        await replayer.run([Job(task=TASKS[4], docs=START, sample_id=1, fresh=True)])
    assert replayer.judge_noise  # c1's answer judged 1.0 at sample 0, 0.0 at sample 1


async def test_when_a_further_verdict_cannot_be_had_the_first_stands() -> None:
    world = World(_c1_misjudged, judge_down=True)
    once, again = await _once_then_three(world)
    assert again.hard == once.hard == 1.0 and not again.error
    assert world.calls == {"attempt": 1, "judge": 2}  # the second verdict failed: no third


async def test_a_further_verdict_that_waits_for_its_answer_leaves_the_sample_waiting() -> None:
    """Handoff: the verdict is asked of the agent like any call; the sample is not scored by
    its first verdict meanwhile (a handoff night decides as the model's night would)."""
    world = World(_c1_misjudged, pending=True)
    _, waiting = await _once_then_three(world)
    assert waiting.error.startswith(JUDGE_ERROR)
    assert world.calls == {"attempt": 1, "judge": 2}


async def test_a_mistaken_verdict_does_not_move_a_task_once_the_judge_contradicted_itself() -> None:
    world = World(_c1_misjudged)
    async with _pool(world) as pool:
        measure = _measure(pool)
        base, cand = await compare(measure, TASKS, START, WITH_RULE, phase="trial")
        assert base.scores["c1"] == (1.0,) and cand.scores["c1"] == (0.0,)  # the mistake
        assert not measure.replayer.judge_noise and world.calls["judge"] == 12
        # the judge is heard contradicting itself: c1's answer judged again, in another sample
        await compare(measure, TASKS[3:], START, START, phase="trial", offset=100)
        assert measure.replayer.judge_noise
        judged = world.calls["judge"]
        base, cand = await compare(measure, TASKS, START, WITH_RULE, phase="trial", offset=200)
    # every answer the rule changed (all six tasks') judged again until two verdicts
    # agree: one more each, two more for c1's misjudged baseline answer
    assert world.calls["judge"] - judged == 12 + 6 * 2 + 1
    assert base.scores["c1"] == cand.scores["c1"] == (0.0,)
    assert all(base.scores[t] == (0.0,) and cand.scores[t] == (1.0,) for t in ("a0", "a1", "a2"))
    # no answer asked again for more opinions; the baseline arm at 200 is read back but
    # for the four pairs that move (a0-a2, and c1's misjudged one), asked for real
    assert world.calls["attempt"] == 12 + 3 + 6 + 4


async def test_a_judge_never_seen_to_contradict_itself_is_asked_once() -> None:
    world = World(lambda *_: False)
    async with _pool(world) as pool:
        measure = _measure(pool)
        await compare(measure, TASKS, START, START, phase="trial")
        base, cand = await compare(measure, TASKS, START, WITH_RULE, phase="trial", offset=100)
    assert not measure.replayer.judge_noise
    # one verdict an answer; the second baseline arm (START again, at samples 100) is read
    # back from the answers of the first, each judged in its own sample (a consistent
    # night: skillopt_sleep.stand_in), but for the three a-tasks the rule moves: a pair
    # that moves is asked for real (its verdict the one its read-back had: the cache)
    assert world.calls == {"attempt": 6 + 6 + 3, "judge": 6 + 12}
    assert [cand.scores[t][0] - base.scores[t][0] for t in ("a0", "c0")] == [1.0, 0.0]


def _with_opinions(job: Job, n: int) -> Job:
    return Job(task=job.task, docs=job.docs, sample_id=job.sample_id, phase=job.phase,
               fresh=job.fresh, opinions=n)  # fmt: skip
