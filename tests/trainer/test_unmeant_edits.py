"""Edits that cannot be meant, in the trainer (issue 31 item 6): an analyst that echoes its
prompt (the example's placeholder, a line of its instructions) has those edits refused
before any trial, with why in the step's diagnostics; the QA demo over loopback HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from skillopt.backends.pool import BackendPool
from skillopt.config import PoolConfig
from skillopt.trainer.build import build_environment
from skillopt.trainer.config import load_trainer_config
from skillopt.trainer.loop import Trainer
from skillopt.trainer.replies import EditItem, SourceType
from support.demo_world_http import Reshape, demo_items, demo_reply_fn, stage_of
from support.fake_model_server import FakeModelServer, Request

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs/trainer/qa_demo.toml"
ECHOES = [
    {"op": "append", "target": "<exact text or empty>", "content": "<new text or empty>"},
    {"op": "append", "target": "", "content": "Prefer one clear sentence per rule."},
]


def _echoes_first(*, keep_real: bool) -> Reshape:
    """An analyst whose edits lead with echoes of the prompt (and are only those unless
    ``keep_real``)."""

    def reshape(text: str, _request: Request) -> str:
        data = json.loads(text)
        real = data["patch"]["edits"] if keep_real else []
        data["patch"]["edits"] = [*ECHOES, *real]
        data["appendix_notes"] = ["<reminder>"]
        return json.dumps(data)

    return reshape


async def _train(tmp_path: Path, *, keep_real: bool) -> tuple[dict[str, Any], list[str]]:
    out = tmp_path / "run"
    cfg = load_trainer_config(
        DEMO,
        overrides=[
            f"out_root={json.dumps(str(out))}",
            "train.num_epochs=1",
            "evaluation.eval_test=false",
        ],
    )
    env = build_environment(cfg)
    items = demo_items(env)
    reply = demo_reply_fn(_echoes_first(keep_real=keep_real), items=items)
    with FakeModelServer(reply_fn=reply) as server:
        pool_cfg = PoolConfig.model_validate({
            "members": [{"kind": "openai", "name": "m", "base_url": server.url("m"),
                         "model": "fake", "timeout": 10}],
            "roles": {"target": ["m"], "optimizer": ["m"]},
            "cache": {"enabled": False},
        })  # fmt: skip
        async with BackendPool.from_config(pool_cfg) as pool:
            summary = await Trainer(cfg, env, pool, pool_accounting=pool.accounting).run()
        stages = [stage_of(request, items) for request in server.requests]
    return summary, stages


def _refusals(out: Path) -> list[str]:
    history = json.loads((out / "history.json").read_text())
    return [d["refused"] for h in history for d in h["diagnostics"] if "refused" in d]


async def test_an_analyst_echoing_its_prompt_costs_no_trial(tmp_path: Path) -> None:
    summary, stages = await _train(tmp_path, keep_real=False)
    out = tmp_path / "run"
    history = json.loads((out / "history.json").read_text())
    assert history and all(h["action"] == "skip_no_patches" for h in history)
    assert summary["total_accepts"] == 0
    assert not list(out.rglob("candidate_skill.md"))  # no candidate, so no gate call
    assert not {"merge", "rank", "rewrite"} & set(stages)
    refused = _refusals(out)
    assert any("placeholder" in r or "template slot" in r for r in refused)
    assert any("repeats the prompt's own instructions" in r for r in refused)
    assert any(r.startswith("appendix note refused") for r in refused)
    for patch in out.rglob("patches/minibatch_*.json"):
        assert json.loads(patch.read_text())["edits"] == []


async def test_the_meant_edits_beside_the_echoes_are_tried(tmp_path: Path) -> None:
    summary, _ = await _train(tmp_path, keep_real=True)
    out = tmp_path / "run"
    assert _refusals(out)
    assert summary["total_accepts"] >= 1
    for skill in out.rglob("candidate_skill.md"):
        text = skill.read_text()
        assert "<new text or empty>" not in text and "<reminder>" not in text
        assert "Prefer one clear sentence per rule." not in text


def test_an_echo_of_the_guidance_spliced_into_the_prompt_is_refused() -> None:
    from skillopt.trainer.step.reflect import _SIDE_GUIDANCE, meant_edits

    guidance = _SIDE_GUIDANCE[SourceType.FAILURE]
    echo = EditItem(op="append", content=guidance.split(". ")[0])
    real = EditItem(op="append", content="Give the bare number, no units.")
    kept, refused = meant_edits([echo, real], template="analyst", instructions=guidance)
    assert kept == [real] and len(refused) == 1
