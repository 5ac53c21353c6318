"""A judging that failed for the moment is asked again; the answer it was judging is not.

When the judge's call fails after the pool's retries (a 503, a timeout), the sample is
drawn again by the gate (:data:`skillopt.gate.sampling.REDRAWS`). The answer came back and
was paid for, so only the judge is asked again: a lost verdict does not become a missing
sample for the rest of the night. A judge whose replies cannot be read is not asked again.
Driven through the real pool with a scripted member.
"""

from __future__ import annotations

import json
from collections import Counter

from skillopt.backends.base import Completion, CompletionRequest, Usage
from skillopt.errors import RetryableBackendError
from skillopt.types import ReferenceKind, TaskRecord
from skillopt_sleep.replay import JUDGE_ERROR, Docs, Job, Replayer
from support.pools import scripted_pool

TASK = TaskRecord(id="t1", intent="Fix the login redirect.", reference="names the file",
                  reference_kind=ReferenceKind.RUBRIC)  # fmt: skip
JOB = Job(task=TASK, docs=Docs(skill="be brief", memory=""), sample_id=7, phase="final",
          fresh=True)  # fmt: skip


class Scripted:
    """The attempt answers; the judge's first ``judge_failures`` calls fail with ``kind``,
    then it answers (a garbled verdict when ``garbled``)."""

    name = "scripted"
    model = "scripted"

    def __init__(self, judge_failures: int, kind: str = "server", garbled: bool = False) -> None:
        self.calls: Counter[str] = Counter()
        self.judge_failures, self.kind, self.garbled = judge_failures, kind, garbled

    async def aclose(self) -> None:
        return None

    async def complete(self, request: CompletionRequest) -> Completion:
        stage = str(request.metadata.get("stage"))
        self.calls[stage] += 1
        if stage == "judge":
            if self.calls[stage] <= self.judge_failures:
                raise RetryableBackendError("scripted 503", kind=self.kind, member=self.name)
            text = "no verdict here" if self.garbled else json.dumps({"score": 1.0, "reason": "ok"})
        else:
            text = "Changed auth/redirect.py so the login lands on the page asked for."
        return Completion(text=text, usage=Usage.estimate(request.prompt, text),
                          member=self.name, latency=0.0)  # fmt: skip


async def test_a_judge_outage_is_judged_again_without_a_new_attempt() -> None:
    model = Scripted(judge_failures=1)
    async with scripted_pool(model) as pool:
        replayer = Replayer(pool=pool, marker="[skillopt]")
        (first,) = await replayer.run([JOB])
        assert first.error.startswith(JUDGE_ERROR) and first.response
        (again,) = await replayer.run([JOB])  # the gate draws the sample again
    assert not again.error and again.hard == 1.0
    assert again.response == first.response
    assert model.calls == {"attempt": 1, "judge": 2}


async def test_a_judge_whose_replies_cannot_be_read_is_not_asked_again() -> None:
    model = Scripted(judge_failures=0, garbled=True)
    async with scripted_pool(model) as pool:
        replayer = Replayer(pool=pool, marker="[skillopt]")
        (first,) = await replayer.run([JOB])
        (again,) = await replayer.run([JOB])
    assert first.error.startswith(JUDGE_ERROR)
    assert again == first
    assert model.calls == {"attempt": 1, "judge": 1}
