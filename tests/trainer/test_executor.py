"""The executor settings, errors across a process boundary, and a missing Ray."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from skillopt.errors import BackendAuthError, ConfigError, RetryableBackendError, SkillOptError
from skillopt.executor.wire import error_from_wire, error_to_wire
from skillopt.trainer.config import load_trainer_config

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "exc",
    [
        BackendAuthError("not logged in", member="agent", status=1),
        RetryableBackendError("busy", member="m", status=503, retry_after=2.5),
        ConfigError("bad", key="env.name"),
        TimeoutError("slow"),
    ],
)
def test_an_error_crosses_as_the_same_class_message_and_attributes(exc: BaseException) -> None:
    back = error_from_wire(pickle.loads(pickle.dumps(error_to_wire(exc))))
    assert type(back) is type(exc)
    assert str(back) == str(exc)
    assert {k: v for k, v in vars(back).items()} == {k: v for k, v in vars(exc).items()}


def test_an_unknown_error_type_arrives_as_our_root_error() -> None:
    back = error_from_wire({"type": "os.system", "args": ["x"], "attrs": {}})
    assert type(back) is SkillOptError and str(back) == "x"


def test_a_missing_ray_is_a_config_error_naming_the_key() -> None:
    code = (
        "import sys, anyio; sys.modules['ray'] = None\n"
        "from skillopt.executor.ray_exec import open_ray_executor\n"
        "from skillopt.executor.settings import ExecutorSettings\n"
        "async def main():\n"
        "    async with open_ray_executor(ExecutorSettings(kind='ray')):\n"
        "        pass\n"
        "anyio.run(main)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode != 0
    assert "ConfigError" in done.stderr
    assert "executor.kind" in done.stderr and "skillopt[ray]" in done.stderr


def test_executor_settings_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"executor\.kind"):
        load_trainer_config(REPO / "configs/trainer/qa_demo.toml", overrides=["executor.kind=dask"])
    cfg = load_trainer_config(
        REPO / "configs/trainer/qa_demo.toml",
        overrides=["executor.kind=ray", 'executor.address="auto"'],
    )
    assert cfg.executor.address == "auto"
