"""A miner's rule checks state what an answer must hold, not all that makes it right.

A check on an answer's length or a path prefix is met by a near-miss too. So an answer
that meets a mined task's checks is judged by the model judge as well; one that fails
them scores 0 without a judge call. Checks a user wrote (a tasks file) or a demo ships
stay the whole judge. Driven through the real pool with a scripted model.
"""

from __future__ import annotations

import json

from skillopt.backends.base import Completion, CompletionRequest, Role, Usage
from skillopt.backends.pool import BackendPool, MemberSpec
from skillopt.types import Origin, ReferenceKind, RuleCheck, TaskRecord
from skillopt_sleep.replay import Docs, Job, Replayer, calls_per_sample

SHORT = RuleCheck(op="max_chars", arg=40)


class Scripted:
    """Answers the attempt with a near-miss (short, wrong); the judge says it is wrong."""

    name = "scripted"
    model = "scripted"

    def __init__(self) -> None:
        self.judged = 0

    async def aclose(self) -> None:
        return None

    async def complete(self, request: CompletionRequest) -> Completion:
        if request.metadata.get("stage") == "judge":
            self.judged += 1
            text = json.dumps({"score": 0.1, "reason": "names the wrong file"})
        else:
            text = "see utils.py" if "short" in str(request.metadata["task"]["id"]) else "x" * 80
        usage = Usage.estimate(request.prompt, text)
        return Completion(text=text, usage=usage, member=self.name, latency=0.0)


def _task(task_id: str, origin: Origin, kind: ReferenceKind = ReferenceKind.RULE) -> TaskRecord:
    return TaskRecord(id=task_id, intent="Where is the retry delay computed?",
                      reference_kind=kind, checks=(SHORT,), origin=origin)  # fmt: skip


async def _judge(task: TaskRecord) -> tuple[float, int]:
    model = Scripted()
    spec = MemberSpec(backend=model, max_concurrency=2, timeout=10.0)
    pool = BackendPool({Role.TARGET: [spec], Role.OPTIMIZER: [spec]})
    async with pool:
        replayer = Replayer(pool=pool, marker="[skillopt]")
        (result,) = await replayer.run([Job(task=task, docs=Docs(skill="", memory=""))])
    assert not result.error, result.error
    return result.hard, model.judged


async def test_a_near_miss_that_meets_a_mined_check_is_judged_by_the_model() -> None:
    assert await _judge(_task("short-mined", Origin.MINED)) == (0.0, 1)
    assert calls_per_sample(_task("short-mined", Origin.MINED)) == 2


async def test_an_answer_failing_a_mined_check_scores_without_a_judge_call() -> None:
    assert await _judge(_task("long-mined", Origin.MINED)) == (0.0, 0)
    rubric = _task("long-rubric", Origin.MINED, ReferenceKind.RUBRIC)
    assert await _judge(rubric) == (0.0, 0)  # a rubric task's checks come first too


async def test_checks_a_user_wrote_are_the_whole_judge() -> None:
    assert await _judge(_task("short-manual", Origin.MANUAL)) == (1.0, 0)
    assert calls_per_sample(_task("short-manual", Origin.MANUAL)) == 1
