"""Prompts laid out for providers' prompt caching: what every call of a kind shares comes
first (instructions, then documents), what differs comes last, and nothing is sent twice."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from skillopt.types import TaskRecord
from skillopt_sleep.harvest.digest import SessionDigest, SourceKind
from skillopt_sleep.mining.groups import RequestGroup
from skillopt_sleep.mining.joint import mine_joint
from skillopt_sleep.mining.llm import MiningTally
from skillopt_sleep.replay import Docs, Job, Replayer
from support.trainer_fakes import ScriptedBackend


def _common_prefix(a: str, b: str) -> str:
    """The text both prompts start with (as a provider's prefix cache compares them)."""
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return a[:n]


def _digest(n: int) -> SessionDigest:
    return SessionDigest(
        session_id=f"s{n}",
        path=Path(f"/tmp/s{n}.jsonl"),
        source=SourceKind.CLAUDE_CODE,
        cwd=Path("/work/shop"),
        started_at=datetime(2026, 1, n, tzinfo=UTC),
        ended_at=datetime(2026, 1, n, tzinfo=UTC),
        user_intents=(f"{('Rename', 'Move')[n - 1]} the settings loader",),
        assistant_finals=(f"answer {n}",),
    )


async def test_mining_prompts_share_their_instructions_as_a_prefix() -> None:
    backend = ScriptedBackend(reply=lambda r: '{"tasks": []}')  # a lone entry's shape
    for n in (1, 2):
        group = RequestGroup((_digest(n),))
        await mine_joint(backend, [group], project="shop", tally=MiningTally())
    first, second = (r.prompt for r in backend.requests)
    shared = _common_prefix(first, second)
    assert "# How to answer" in shared and "Allowed ops:" in shared
    assert "the settings loader" not in shared


async def test_a_judge_prompt_carries_the_request_once() -> None:
    intents = ("Rename the settings loader and update every caller", "Add a changelog entry")
    backend = ScriptedBackend(
        reply=lambda r: '{"score": 1.0, "reason": "ok"}' if r.stage == "judge" else "done"
    )
    replayer = Replayer(pool=backend, marker="<!-- m -->")
    tasks = [TaskRecord(id=f"t{i}", intent=text) for i, text in enumerate(intents)]
    docs = Docs(skill="the skill", memory="the notes")
    await replayer.run([Job(task=t, docs=docs, phase="rollout") for t in tasks])
    judged = [r.prompt for r in backend.requests if r.stage == "judge"]
    assert len(judged) == 2
    assert sorted(sum(p.count(text) for text in intents) for p in judged) == [1, 1]
    attempts = [r.prompt for r in backend.requests if r.stage == "rollout"]
    shared = _common_prefix(*attempts)  # instructions and both documents first, the task last
    assert "the notes" in shared and not any(text in shared for text in intents)
