"""The shipped example configs load as they are: a user's first copy must not be an error."""

from __future__ import annotations

from pathlib import Path

from skillopt.config import PoolConfig, load_toml_model
from skillopt_sleep.config import load_sleep_config

ROOT = Path(__file__).resolve().parents[2]


def test_sleep_example_loads() -> None:
    cfg = load_sleep_config(ROOT / "configs" / "sleep.example.toml", environ={})
    assert cfg.pool is not None and cfg.pool.roles.target == ["main"]
    assert cfg.daemon.time == "02:30" and cfg.budget.max_calls == 2000


def test_endpoints_example_loads() -> None:
    pool = load_toml_model(ROOT / "configs" / "endpoints.example.toml", PoolConfig, environ={})
    assert len({m.name for m in pool.members}) == len(pool.members) >= 4
