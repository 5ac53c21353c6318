"""A test "agent" for handoff mode: it answers pending prompts as the mock world would.

The same night is first run on a recording mock pool (no cache, so every request reaches
the mock and its reply is kept under the request's handoff prompt id); the agent then
answers a handoff night's ``pending.json`` from those replies, sitting after sitting.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from skillopt.backends.base import Completion, CompletionRequest, Role
from skillopt.backends.handoff import prompt_id, read_pending, write_answer
from skillopt.backends.mock import MockBackend
from skillopt.backends.pool import BackendPool, MemberSpec

__all__ = [
    "RecordingMock",
    "Sittings",
    "answer_pending",
    "mined_nothing",
    "recording_pool",
    "until",
]


class RecordingMock:
    """The mock member, keeping each reply under its request's handoff prompt id."""

    def __init__(self) -> None:
        self._mock = MockBackend(name="mock")
        self.replies: dict[str, str] = {}
        self.requests: dict[str, CompletionRequest] = {}

    @property
    def name(self) -> str:
        return "mock"

    @property
    def model(self) -> str:
        return "mock"

    async def complete(self, request: CompletionRequest) -> Completion:
        done = await self._mock.complete(request)
        self.replies[prompt_id(request)] = done.text
        self.requests[prompt_id(request)] = request
        return done

    async def aclose(self) -> None:
        await self._mock.aclose()


def recording_pool(member: RecordingMock) -> BackendPool:
    spec = MemberSpec(backend=member, max_concurrency=16)
    return BackendPool({Role.TARGET: [spec], Role.OPTIMIZER: [spec]})


def answer_pending(directory: Path, replies: dict[str, str]) -> int:
    """Answer every prompt ``pending.json`` lists; how many were answered."""
    pending = read_pending(directory)
    for p in pending:
        write_answer(directory, p.id, replies[p.id])
    return len(pending)


@dataclass
class Sittings:
    """What a handoff night asked, sitting by sitting: (stage it stopped in, prompts)."""

    asked: list[tuple[str, int]] = field(default_factory=list)

    @property
    def prompts(self) -> int:
        return sum(n for _, n in self.asked)


async def until(predicate: Callable[[], bool], poll: float = 0.02) -> None:
    """Wait until ``predicate()`` holds: what it looks at is a file another task or process
    writes, which offers no event to wait on (the caller bounds the wait)."""
    while not predicate():  # noqa: ASYNC110
        await anyio.sleep(poll)


def mined_nothing(prompt: str) -> str:
    """A sound answer to a mining prompt: every session entry (S1, S2, ...) with no task."""
    count = max(int(n) for n in re.findall(r"\bS(\d+)\b", prompt))
    return json.dumps({"sessions": [{"session": f"S{i}", "tasks": []}
                                    for i in range(1, count + 1)]})  # fmt: skip
