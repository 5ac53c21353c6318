"""Identical requests in flight at the same time share one call; distinct samples never do.

A real pool with one OpenAI-compatible member on the loopback fake model server, which
counts the requests it receives.
"""

from __future__ import annotations

import dataclasses

import anyio

from skillopt.backends.base import Completion, CompletionRequest, Role
from skillopt.errors import BackendError
from support.fake_model_server import FakeModelServer, Reply
from support.pools import one_member_pool


def _judge(sample_id: int = 0, *, tokens: int = 256) -> CompletionRequest:
    return CompletionRequest(
        role=Role.OPTIMIZER, prompt="grade this answer", sample_id=sample_id,
        max_output_tokens=tokens, stage="judge",
    )  # fmt: skip


async def _all(pool: object, requests: list[CompletionRequest]) -> list[Completion | BaseException]:
    out: list[Completion | BaseException] = [BaseException("not run")] * len(requests)

    async def one(i: int, request: CompletionRequest) -> None:
        try:
            out[i] = await pool.complete(request)  # type: ignore[attr-defined]
        except BackendError as exc:
            out[i] = exc

    async with anyio.create_task_group() as tg:
        for i, request in enumerate(requests):
            tg.start_soon(one, i, request)
    return out


async def test_identical_requests_in_flight_share_one_call_and_samples_stay_apart() -> None:
    with FakeModelServer(latency=0.2) as server:
        pool = one_member_pool(server)
        try:
            same = [_judge() for _ in range(8)]
            samples = [_judge(sample_id=i) for i in range(1, 5)]
            other_cap = [_judge(tokens=64)]
            done = await _all(pool, [*same, *samples, *other_cap])
        finally:
            await pool.aclose()
        sent = server.requests_for("opt")
    assert all(isinstance(d, Completion) for d in done)
    replies = [d for d in done if isinstance(d, Completion)]
    assert len(sent) == 1 + 4 + 1  # one for the eight identical, one per distinct request
    assert len({r.text for r in replies[:8]}) == 1
    assert sum(not r.cached for r in replies[:8]) == 1  # the others share the leader's reply
    assert not any(r.cached for r in replies[8:])  # another sample or cap is its own call
    assert sorted(r.body["max_completion_tokens"] for r in sent) == [64, *[256] * 5]


async def test_a_failed_leader_is_not_shared_its_followers_call_themselves() -> None:
    with FakeModelServer(latency=0.2) as server:
        server.script("opt", Reply(status=500))
        pool = one_member_pool(server)  # no retries: the leader's one attempt fails
        try:
            done = await _all(pool, [_judge() for _ in range(4)])
        finally:
            await pool.aclose()
        sent = server.requests_for("opt")
    failed = [d for d in done if isinstance(d, BaseException)]
    assert len(failed) == 1 and isinstance(failed[0], BackendError)
    assert sum(isinstance(d, Completion) for d in done) == 3
    assert len(sent) >= 2  # the followers asked again instead of inheriting the failure


async def test_a_request_that_wants_a_fresh_reply_is_never_merged() -> None:
    with FakeModelServer(latency=0.2) as server:
        pool = one_member_pool(server)
        try:
            fresh = [dataclasses.replace(_judge(), use_cache=False) for _ in range(3)]
            await _all(pool, fresh)
        finally:
            await pool.aclose()
        assert len(server.requests_for("opt")) == 3
