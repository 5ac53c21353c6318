"""A batch aborted because the backend was down must not stay aborted once it is back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt.backends.base import CompletionRequest
from skillopt.backends.wrappers import StageCounter
from skillopt.errors import BackendError, RetryableBackendError
from skillopt.trainer.config import load_trainer_config
from skillopt.trainer.envs.base import RolloutResult
from skillopt.trainer.envs.qa import QAEnvironment
from skillopt.trainer.persistence import RunDir
from skillopt.trainer.rollouts import rollout
from skillopt.trainer.run_context import RunContext
from skillopt.trainer.step.reflect import analyse
from skillopt.types import Split
from support.trainer_fakes import ScriptedBackend

REPO = Path(__file__).resolve().parents[2]


def context(tmp_path: Path, backend: ScriptedBackend) -> RunContext:
    cfg = load_trainer_config(
        REPO / "configs/trainer/base.toml", overrides=[f"out_root={json.dumps(str(tmp_path))}"]
    )
    run = RunDir(tmp_path)
    run.prepare()
    return RunContext(
        cfg=cfg,
        env=QAEnvironment(),
        completer=StageCounter(backend),
        run=run,
    )


def answer(request: CompletionRequest) -> str:
    return f"<answer>{request.metadata['qa_item']['answers'][0]}</answer>"


async def test_failed_rows_are_redone_when_the_backend_is_back(tmp_path: Path) -> None:
    items = list(QAEnvironment().items(Split.VAL))[:6]
    out = tmp_path / "eval"
    down_for = {items[k].id for k in range(4)}  # 4 of 6 fail: the batch is refused

    def flaky(request: CompletionRequest) -> str:
        if request.metadata["qa_item"]["id"] in down_for:
            raise RetryableBackendError("connection refused", kind="connection")
        return answer(request)

    with pytest.raises(BackendError, match="4/6 rollouts failed"):
        await rollout(context(tmp_path, ScriptedBackend(reply=flaky)), items, "S", out)

    healthy = ScriptedBackend(reply=answer)
    got = await rollout(context(tmp_path, healthy), items, "S", out)
    assert [r.task_id for r in got] == [i.id for i in items]
    assert all(not r.error and r.hard == 1.0 for r in got)
    assert len(healthy.requests) == 4  # only the failed rows ran again


def edits_reply(request: CompletionRequest) -> str:
    edits = [{"op": "append", "content": "Rule."}]
    return json.dumps({"batch_size": 2, "patch": {"reasoning": "", "edits": edits}})


async def test_an_unreachable_optimizer_stops_the_step_instead_of_skipping_it(
    tmp_path: Path,
) -> None:
    batch = [
        RolloutResult(task_id=f"i{k}", hard=float(k % 2), soft=0.0, task_type="qa")
        for k in range(6)
    ]

    def down(_request: CompletionRequest) -> str:
        raise RetryableBackendError("optimizer unreachable", kind="connection")

    with pytest.raises(BackendError, match="all 2 analyst calls failed"):
        await analyse(
            context(tmp_path, ScriptedBackend(reply=down)),
            batch,
            skill="",
            patches_dir=tmp_path / "patches",
            seed=1,
            step_buffer="",
            meta_skill="",
        )

    calls = 0

    def some_down(request: CompletionRequest) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RetryableBackendError("optimizer unreachable", kind="connection")
        return edits_reply(request)

    got = await analyse(
        context(tmp_path, ScriptedBackend(reply=some_down)),
        batch,
        skill="",
        patches_dir=tmp_path / "patches",
        seed=1,
        step_buffer="",
        meta_skill="",
    )
    assert len(got.patches) == 1  # one analyst failing is a note, not an abort
    assert not got.all_failed
