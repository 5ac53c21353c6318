"""Step stages on their own: analyst budget and reuse, rank fallback, rollout resume rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt.atomicio import append_jsonl
from skillopt.backends.base import CompletionRequest, Role
from skillopt.backends.wrappers import StageCounter
from skillopt.errors import BackendError, RetryableBackendError
from skillopt.trainer.config import load_trainer_config
from skillopt.trainer.envs.base import RolloutResult, rollout_to_json
from skillopt.trainer.envs.qa import QAEnvironment
from skillopt.trainer.persistence import RunDir
from skillopt.trainer.replies import EditItem
from skillopt.trainer.rollouts import rollout
from skillopt.trainer.run_context import RunContext, skill_hash
from skillopt.trainer.step.reflect import analyse
from skillopt.trainer.step.select import rank_edits
from skillopt.trainer.step.update import rewrite_skill
from skillopt.types import Split
from support.trainer_fakes import ScriptedBackend

REPO = Path(__file__).resolve().parents[2]


def context(tmp_path: Path, backend: ScriptedBackend, *extra: str) -> RunContext:
    cfg = load_trainer_config(
        REPO / "configs/trainer/base.toml",
        overrides=[f"out_root={json.dumps(str(tmp_path))}", *extra],
    )
    run = RunDir(tmp_path)
    run.prepare()
    return RunContext(
        cfg=cfg,
        env=QAEnvironment(),
        completer=StageCounter(backend),
        run=run,
    )


def six_edits(_request: CompletionRequest) -> str:
    edits = [{"op": "append", "content": f"Rule {i}."} for i in range(6)]
    return json.dumps({"batch_size": 3, "patch": {"reasoning": "", "edits": edits}})


def results(n_fail: int, n_pass: int) -> list[RolloutResult]:
    return [
        RolloutResult(task_id=f"i{k}", hard=float(k >= n_fail), soft=0.0, task_type="qa")
        for k in range(n_fail + n_pass)
    ]


async def test_analysts_keep_at_most_l_edits_and_are_reused(tmp_path: Path) -> None:
    backend = ScriptedBackend(reply=six_edits)
    ctx = context(tmp_path, backend, "optimizer.learning_rate=4", "reflect.minibatch_size=2")
    kwargs = {
        "skill": "",
        "patches_dir": tmp_path / "patches",
        "seed": 5,
        "step_buffer": "",
        "meta_skill": "",
    }
    patches = (await analyse(ctx, results(5, 3), **kwargs)).patches  # type: ignore[arg-type]
    names = sorted(p.name for p in (tmp_path / "patches").iterdir())
    assert names == [
        "minibatch_fail_000.json",
        "minibatch_fail_001.json",
        "minibatch_fail_002.json",
        "minibatch_succ_000.json",
        "minibatch_succ_001.json",
    ]
    assert [len(p.edits) for p in patches] == [4] * 5
    assert all(e.support_count == 3 for p in patches for e in p.edits)  # from batch_size
    assert {e.source_type.value for e in patches[-1].edits} == {"success"}
    calls = len(backend.requests)
    again = (await analyse(ctx, results(5, 3), **kwargs)).patches  # type: ignore[arg-type]
    assert len(backend.requests) == calls  # every minibatch was found on disk
    assert again == patches


async def test_rank_uses_valid_indices_or_falls_back(tmp_path: Path) -> None:
    items = [EditItem(op="append", content=f"e{i}") for i in range(4)]
    ranked = ScriptedBackend(reply=lambda _r: '{"selected_indices": [3, 3, 9, 1, 0]}')
    got, info = await rank_edits(
        context(tmp_path, ranked), items, budget=2, skill="", meta_skill=""
    )
    assert [e.content for e in got] == ["e3", "e1"] and info["ranked_by"] == "optimizer"
    broken = ScriptedBackend(reply=lambda _r: "no idea")
    got, info = await rank_edits(
        context(tmp_path, broken), items, budget=2, skill="", meta_skill=""
    )
    assert [e.content for e in got] == ["e0", "e1"] and info["ranked_by"] == "fallback_first_k"
    assert len(broken.requests) == 2  # one retry before the fallback
    untouched = ScriptedBackend(reply=lambda _r: "unused")
    got, _ = await rank_edits(
        context(tmp_path, untouched), items, budget=0, skill="", meta_skill=""
    )
    assert got == [] and untouched.requests == []


async def test_rollout_redoes_only_missing_rows(tmp_path: Path) -> None:
    def answer(request: CompletionRequest) -> str:
        assert request.role is Role.TARGET
        return f"<answer>{request.metadata['qa_item']['answers'][0]}</answer>"

    backend = ScriptedBackend(reply=answer)
    ctx = context(tmp_path, backend)
    items = list(QAEnvironment().items(Split.VAL))[:5]
    out = tmp_path / "eval"
    done = RolloutResult(task_id=items[1].id, hard=1.0, soft=1.0, task_type="x")
    stale = RolloutResult(task_id=items[2].id, hard=1.0, soft=1.0, task_type="x")
    append_jsonl(
        out / "results.partial.jsonl",
        [
            {"skill_hash": skill_hash("S"), "result": rollout_to_json(done)},
            {"skill_hash": skill_hash("other skill"), "result": rollout_to_json(stale)},
        ],
    )
    got = await rollout(ctx, items, "S", out)
    assert [r.task_id for r in got] == [i.id for i in items]  # item order
    assert got[1].task_type == "x"  # reused row
    assert got[2].task_type != "x"  # a row of another skill is not reused
    assert len(backend.requests) == 4
    assert not (out / "results.partial.jsonl").exists()
    again = await rollout(ctx, items, "S", out)
    assert again == got and len(backend.requests) == 4


async def test_rollout_rows_journaled_before_the_stage_ends_are_redacted(tmp_path: Path) -> None:
    secret = "ghp_abcdefghijklmnopqrstuvwxyz0123"
    items = list(QAEnvironment().items(Split.VAL))[:5]

    def answer(request: CompletionRequest) -> str:
        if request.metadata["qa_item"]["id"] in {i.id for i in items[2:]}:
            raise RetryableBackendError("down", kind="connection")
        return f"push with {secret} <answer>x</answer>"

    out = tmp_path / "eval"
    with pytest.raises(BackendError, match="mostly broken"):  # so the journal stays
        await rollout(context(tmp_path, ScriptedBackend(reply=answer)), items, "S", out)
    journal = (out / "results.partial.jsonl").read_text(encoding="utf-8")
    assert journal.count("\n") == 5 and "push with" in journal
    assert secret not in journal


async def test_rewrite_suggestions_arrive_whole(tmp_path: Path) -> None:
    convention = (
        "When a question names a quantity, answer with the bare number as digits, no words, "
        "no units and no thousands separators, even when the context spells the number out "
        "in words."
    )
    assert len(convention) > 160
    seen: list[str] = []

    def rewrite(request: CompletionRequest) -> str:
        seen.append(request.prompt)
        return json.dumps({"new_skill": "# Skill\n- " + convention})

    ctx = context(tmp_path, ScriptedBackend(reply=rewrite))
    edits = [EditItem(op="append", content=convention)]
    got = await rewrite_skill(ctx, "# Skill\n", edits, step_buffer="")
    assert got is not None
    assert f"- append: {convention}\n" in seen[0]
