"""The replayer pays once for a sample two concurrent batches ask for (the shared baseline arm)."""

from __future__ import annotations

import anyio

from skillopt.backends.base import Completion, CompletionRequest, Usage
from skillopt.types import ReferenceKind, TaskRecord
from skillopt_sleep.replay import Docs, Job, Replayer


class HeldEndpoint:
    """A target that answers nobody until ``release_after`` calls are waiting on it."""

    def __init__(self, release_after: int) -> None:
        self.calls = 0
        self.release_after = release_after
        self.open = anyio.Event()

    async def complete(self, request: CompletionRequest) -> Completion:
        self.calls += 1
        if self.calls >= self.release_after:
            self.open.set()
        await self.open.wait()
        return Completion(text="42", usage=Usage(completion_tokens=1), member="m", latency=0.0)


async def test_two_batches_asking_for_the_same_samples_pay_once() -> None:
    tasks = [
        TaskRecord(id=f"t{i}", intent=f"what is {i}?", reference="42",
                   reference_kind=ReferenceKind.EXACT)
        for i in range(3)
    ]  # fmt: skip
    docs = Docs(skill="be brief", memory="")
    jobs = [Job(task=t, docs=docs, sample_id=k, phase="trial", fresh=True)
            for t in tasks for k in range(2)]  # fmt: skip
    endpoint = HeldEndpoint(release_after=len(jobs))
    replayer = Replayer(pool=endpoint, marker="")
    got: list[list[float]] = [[], []]

    async def batch(i: int) -> None:
        results = await replayer.run(jobs)
        got[i] = [r.hard for r in results]

    async with anyio.create_task_group() as tg:
        tg.start_soon(batch, 0)
        tg.start_soon(batch, 1)  # asks while the first batch's calls are still out
    assert endpoint.calls == len(jobs)  # not 2 x: the second batch followed the first
    assert got[0] == got[1] == [1.0] * len(jobs)
    assert replayer.reused == len(jobs)
