"""A short training run whose every call goes over HTTP to the fake model server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt.backends.pool import BackendPool
from skillopt.config import PoolConfig
from skillopt.trainer.config import load_trainer_config
from skillopt.trainer.envs.qa import QAEnvironment
from skillopt.trainer.loop import Trainer
from support.demo_world_http import Reshape, demo_items, demo_reply_fn
from support.fake_model_server import FakeModelServer, Request

REPO = Path(__file__).resolve().parents[2]


def _broken_first() -> Reshape:
    """An analyst whose first reply is unusable (not JSON), forcing a retry."""
    broken = [True]

    def reshape(text: str, request: Request) -> str:
        if broken[0] and len(request.body.get("messages", [])) == 1:
            broken[0] = False
            return "I think the skill should mention numbers."
        return text

    return reshape


@pytest.mark.slow
async def test_training_over_http_with_a_schema_retry(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = load_trainer_config(
        REPO / "configs/trainer/qa_demo.toml",
        overrides=[
            f"out_root={json.dumps(str(out))}",
            "train.num_epochs=1",
            "backend.demo_latency_s=0",
        ],
    )
    env = QAEnvironment()
    with FakeModelServer(reply_fn=demo_reply_fn(_broken_first(), items=demo_items(env))) as server:
        names = ["m0", "m1"]
        pool_cfg = PoolConfig.model_validate(
            {
                "members": [
                    {
                        "kind": "openai",
                        "name": n,
                        "base_url": server.url(n),
                        "model": "fake",
                        "timeout": 10,
                        "max_concurrency": 8,
                    }
                    for n in names
                ],
                "roles": {"target": names, "optimizer": names},
                "cache": {"enabled": False},
            }
        )
        async with BackendPool.from_config(pool_cfg) as pool:
            summary = await Trainer(cfg, env, pool, pool_accounting=pool.accounting).run()
        assert server.total("m0") > 0 and server.total("m1") > 0  # round-robin over members
        retries = [
            r
            for r in server.requests
            if isinstance(r.body, dict) and len(r.body.get("messages", [])) == 3
        ]
    assert len(retries) == 1  # the invalid analyst reply was retried once, with the problem
    assert "could not be used" in retries[0].user_text
    assert summary["total_accepts"] >= 1
    # the harmful edit is refused: a step rejected, or attribution dropped it from a step
    history = json.loads((out / "history.json").read_text())
    assert summary["total_rejects"] >= 1 or any(h.get("dropped_edits") for h in history)
    assert summary["test_hard"] > summary["baseline_test_hard"]
