"""The handoff member's waiting mode: a call stays open until its answer file lands."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from skillopt.backends.handoff import (
    PENDING_NAME,
    HandoffBackend,
    answer_path,
    prompt_id,
    read_pending,
    write_answer,
)
from skillopt.errors import AnswerPendingError
from skillopt_sleep.handoff import live_night, next_prompt, serve_next, take_answer
from support.handoff_agent import until

from .test_handoff import attempt, judge

POLL = 0.01


async def listed(directory: Path, pid: str) -> None:
    """Wait until the night lists ``pid`` in ``pending.json`` (polling the file, as an agent)."""
    await until(lambda: pid in {p.id for p in read_pending(directory)}, POLL)


async def test_a_waiting_call_takes_its_answer_when_it_lands(tmp_path: Path) -> None:
    member = HandoffBackend(name="handoff", directory=tmp_path, wait=60, poll=POLL)
    request = attempt()
    pid = prompt_id(request)
    replies: list[str] = []
    async with anyio.create_task_group() as tg:

        async def call() -> None:
            replies.append((await member.complete(request)).text)

        tg.start_soon(call)
        await listed(tmp_path, pid)
        doc = json.loads((tmp_path / PENDING_NAME).read_text())
        assert doc["live"]["pid"] > 0 and live_night(tmp_path) == doc["live"]["pid"]
        served = next_prompt(tmp_path)
        assert served["id"] == pid and served["night_running"] is True
        take_answer(tmp_path, pid, "the fix")
    assert replies == ["the fix"]
    assert read_pending(tmp_path) == []  # it was taken: the list says so at once
    await member.aclose()
    assert not (tmp_path / PENDING_NAME).exists()


async def test_a_rejected_answer_is_pending_again_and_the_call_keeps_waiting(
    tmp_path: Path,
) -> None:
    member = HandoffBackend(name="handoff", directory=tmp_path, wait=60, poll=POLL)
    request = judge()
    pid = prompt_id(request)
    replies: list[str] = []
    async with anyio.create_task_group() as tg:

        async def call() -> None:
            replies.append((await member.complete(request)).text)

        tg.start_soon(call)
        await listed(tmp_path, pid)
        write_answer(tmp_path, pid, "looks fine to me")
        await until(lambda: bool(read_pending(tmp_path) and read_pending(tmp_path)[0].problem))
        assert "expected format" in read_pending(tmp_path)[0].problem
        assert answer_path(tmp_path, pid).with_suffix(".rejected.md").exists()
        served = next_prompt(tmp_path)
        assert served["id"] == pid and "rejected" in served["message"]
        write_answer(tmp_path, pid, '{"score": 1}')
    assert replies == ['{"score": 1}']


async def test_patience_spent_with_no_answer_ends_the_calls_as_without_waiting(
    tmp_path: Path,
) -> None:
    member = HandoffBackend(name="handoff", directory=tmp_path, wait=0.2, poll=POLL)
    with pytest.raises(AnswerPendingError):
        await member.complete(attempt())
    with pytest.raises(AnswerPendingError):  # later calls no longer wait
        with anyio.fail_after(0.1):
            await member.complete(attempt("Another."))
    await member.aclose()
    doc = json.loads((tmp_path / PENDING_NAME).read_text())
    assert "live" not in doc and len(doc["prompts"]) == 2
    assert live_night(tmp_path) is None


async def test_a_cancelled_wait_leaves_its_prompt_pending(tmp_path: Path) -> None:
    member = HandoffBackend(name="handoff", directory=tmp_path, wait=60, poll=POLL)
    request = attempt()
    with anyio.move_on_after(0.2):
        await member.complete(request)
    await member.aclose()
    doc = json.loads((tmp_path / PENDING_NAME).read_text())
    assert "live" not in doc and [p["id"] for p in doc["prompts"]] == [prompt_id(request)]


async def test_serve_next_waits_for_a_live_nights_next_prompt(tmp_path: Path) -> None:
    member = HandoffBackend(name="handoff", directory=tmp_path, wait=60, poll=POLL)
    first, second = attempt("One."), attempt("Two.")
    async with anyio.create_task_group() as tg:

        async def night() -> None:
            await member.complete(first)
            await anyio.sleep(0.2)  # the night thinks before it asks again
            await member.complete(second)

        tg.start_soon(night)
        await listed(tmp_path, prompt_id(first))
        take_answer(tmp_path, prompt_id(first), "one")
        served = await serve_next(tmp_path, patience=10, poll=POLL)
        assert served["id"] == prompt_id(second)
        take_answer(tmp_path, prompt_id(second), "two")
    await member.aclose()
    assert (await serve_next(tmp_path, patience=10, poll=POLL))["night_running"] is False
