"""Rollouts as Ray tasks (``[executor] kind = "ray"``) on a private local Ray instance.

The instance (and the fake agent CLIs) run inside a private network namespace where ``lo`` is
the only interface (skipped where that is not permitted); test_executor_listeners.py checks, outside
any namespace, that the executor's own instance listens on loopback only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from skillopt.backends.base import CompletionRequest, Role
from skillopt.backends.open import open_completer
from skillopt.config import PoolConfig
from skillopt.errors import BackendAuthError
from skillopt.trainer.build import open_environment
from skillopt.trainer.config import TrainerConfig, load_trainer_config
from skillopt.trainer.demo import DemoWorld
from skillopt.trainer.envs.base import RolloutContext
from skillopt.trainer.loop import Trainer
from skillopt.types import Split
from skillopt_sleep.config import SleepConfig
from support.fake_cli import FakeCli, codex_events, pid_alive, wait_dead, write_fake_cli
from support.netns import private_network
from support.trainer_fakes import pool_of

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
# one short epoch of qa_exec over 6 items, answered by the agent member of the pool file
SMALL_EXEC_RUN = (
    *("env.name=qa_exec", "env.exec_member=agent", "env.limit=6"),
    *("train.batch_size=6", "train.num_epochs=1"),
    *("evaluation.eval_test=false", "optimizer.use_slow_update=false"),
)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    with private_network() as (entered, why):
        if not entered:
            pytest.skip(f"Ray listens on every interface; needs a private network: {why}")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            configure_logging=False,
            log_to_driver=False,
        )
        try:
            yield ray
        finally:
            ray.shutdown()


def fake_codex(directory: Path, **behaviour: Any) -> FakeCli:
    return write_fake_cli(
        directory,
        "codex",
        stdout=codex_events("yes"),
        last_message=json.dumps({"final_response": "<answer>yes</answer>", "final_answer": "yes"}),
        **behaviour,
    )


def exec_cfg(tmp_path: Path, fake: FakeCli, out: str, *extra: str, limit: int = 4) -> TrainerConfig:
    pool_toml = tmp_path / "pool.toml"
    member = {
        "kind": '"codex"',
        "name": '"agent"',
        "executable": json.dumps(str(fake.path)),
        "max_concurrency": str(limit),
        "timeout": "60",
    }
    lines = ["[[members]]", *(f"{k} = {v}" for k, v in member.items())]
    lines += ["[roles]", 'target = ["agent"]', 'optimizer = ["agent"]']
    pool_toml.write_text("\n".join(lines) + "\n")
    return load_trainer_config(
        REPO / "configs/trainer/qa_demo.toml",
        overrides=[
            f"out_root={json.dumps(str(tmp_path / out))}",
            f"backend.pool_config={json.dumps(str(pool_toml))}",
            *SMALL_EXEC_RUN,
            *extra,
        ],
    )


def tree(out: Path) -> dict[str, bytes]:
    """The run's files but timing and the agents' own transcripts (they name the paths)."""
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != "timing.json" and "/work/" not in p.as_posix()
    }


async def train(cfg: TrainerConfig) -> dict[str, Any]:
    async with open_environment(cfg) as env, pool_of(DemoWorld()) as pool:
        return await Trainer(cfg, env, pool).run()


def test_ray_listens_on_loopback_only(local_ray: Any) -> None:
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed")
    listening = subprocess.run(["ss", "-ltnuH"], capture_output=True, text=True, check=True)
    local = [line.split()[4] for line in listening.stdout.splitlines() if line.strip()]
    assert local, "Ray's servers should be listening"
    assert all(a.rsplit(":", 1)[0] in ("127.0.0.1", "[::ffff:127.0.0.1]", "[::1]") for a in local)


async def test_exec_run_on_ray_writes_the_local_run_byte_for_byte(
    local_ray: Any, tmp_path: Path
) -> None:
    fake = fake_codex(tmp_path / "bin")
    local = await train(exec_cfg(tmp_path, fake, "local"))
    calls_local = len(fake.calls())
    remote = await train(exec_cfg(tmp_path, fake, "ray", "executor.kind=ray"))
    assert len(fake.calls()) == 2 * calls_local  # every rollout ran the agent again, on Ray
    assert remote == local
    a, b = tree(tmp_path / "local"), tree(tmp_path / "ray")
    assert a.keys() == b.keys()
    assert [k for k in a if a[k] != b[k]] == []
    # the agents ran in Ray's worker processes, not in this one
    assert {c["pid"] for c in fake.calls()[calls_local:]}.isdisjoint({os.getpid()})


async def test_a_chat_environment_on_ray_sends_its_model_calls_through_this_pool(
    local_ray: Any, tmp_path: Path
) -> None:
    def cfg(out: str, *extra: str) -> TrainerConfig:
        return load_trainer_config(
            REPO / "configs/trainer/qa_demo.toml",
            overrides=[
                f"out_root={json.dumps(str(tmp_path / out))}",
                "env.limit=6",
                "train.batch_size=6",
                "train.num_epochs=1",
                "optimizer.use_slow_update=false",
                *extra,
            ],
        )

    local = await train(cfg("local"))
    remote = await train(cfg("ray", "executor.kind=ray"))
    assert remote == local
    a, b = tree(tmp_path / "local"), tree(tmp_path / "ray")
    assert [k for k in a if a.get(k) != b.get(k)] == []
    assert a.keys() == b.keys()


async def test_an_agent_error_on_a_worker_arrives_as_our_error_class(
    local_ray: Any, tmp_path: Path
) -> None:
    fake = fake_codex(tmp_path / "bin", login_file="auth.json")  # "Not logged in", exit 1
    cfg = exec_cfg(tmp_path, fake, "run", "executor.kind=ray")
    async with open_environment(cfg) as env:
        item = env.items(Split.TRAIN)[0]
        ctx = RolloutContext(
            completer=DemoWorld(), timeout_s=30, max_output_tokens=64, workdir=tmp_path / "w"
        )
        with pytest.raises(BackendAuthError) as caught:
            await env.rollout(item, "skill", ctx)
    assert caught.value.member == "agent"


async def test_the_exec_members_limit_holds_across_workers(local_ray: Any, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    # each agent run holds a lock directory for a while; a second one at the same time
    # finds it taken and leaves an "overlap" mark
    probe = (
        f"mkdir {marks}/lock 2>/dev/null || touch {marks}/overlap; "
        f"sleep 0.3; rmdir {marks}/lock 2>/dev/null; true"
    )
    fake = fake_codex(tmp_path / "bin", run_tools=[["sh", "-c", probe]])
    cfg = exec_cfg(tmp_path, fake, "run", "executor.kind=ray", limit=1)
    async with open_environment(cfg) as env:
        items = list(env.items(Split.TRAIN))[:4]
        ctx = RolloutContext(
            completer=DemoWorld(), timeout_s=30, max_output_tokens=64, workdir=tmp_path / "w"
        )
        async with anyio.create_task_group() as tg:
            for n, item in enumerate(items):
                tg.start_soon(env.rollout, item, "s", replace(ctx, workdir=tmp_path / f"w{n}"))
    assert len(fake.calls()) == 4
    assert not (marks / "overlap").exists()


async def test_cancelling_the_run_cancels_the_ray_task_and_kills_the_agent(
    local_ray: Any, tmp_path: Path
) -> None:
    fake = fake_codex(tmp_path / "bin", hang=True)
    cfg = exec_cfg(tmp_path, fake, "run", "executor.kind=ray")
    async with open_environment(cfg) as env:
        item = env.items(Split.TRAIN)[0]
        ctx = RolloutContext(
            completer=DemoWorld(), timeout_s=600, max_output_tokens=64, workdir=tmp_path / "w"
        )
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(env.rollout, item, "s", ctx)
                while not fake.child_pid_path.exists():  # noqa: ASYNC110 (a worker runs it)
                    await anyio.sleep(0.05)
                scope.cancel()
    agent = fake.calls()[0]["pid"]
    child = int(fake.child_pid_path.read_text())
    # the cancelled call returns only once the worker's function has reaped its agent
    assert not pid_alive(agent), "the agent outlived the cancelled Ray task"
    assert wait_dead(child), "the agent's child outlived the cancelled Ray task"


def test_sigterm_ends_a_ray_run_cancelling_its_tasks(local_ray: Any, tmp_path: Path) -> None:
    """``skillopt train`` as a process (its own private Ray instance): SIGTERM while an agent
    runs on a worker exits 130, and the agent's processes die with the cancelled task."""
    fake = fake_codex(tmp_path / "bin", hang=True)
    cfg = exec_cfg(tmp_path, fake, "run", "executor.kind=ray", "env.rollout_timeout_s=600")
    config = tmp_path / "train.toml"
    config.write_text(f"base = {json.dumps(str(REPO / 'configs/trainer/qa_demo.toml'))}\n")
    overrides = [
        f"out_root={json.dumps(cfg.out_root)}",
        f"backend.pool_config={json.dumps(cfg.backend.pool_config)}",
        *SMALL_EXEC_RUN,
        "executor.kind=ray",
        "executor.num_cpus=2",
        "env.rollout_timeout_s=600",
    ]
    argv = [sys.executable, "-c", "import sys; from skillopt.cli import main; sys.exit(main())"]
    argv += ["train", "--config", str(config), *(f"--set={o}" for o in overrides)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not fake.child_pid_path.exists() and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert wait_dead(int(fake.child_pid_path.read_text()))
    assert all(wait_dead(c["pid"]) for c in fake.calls())
    # the same command resumes the interrupted run to its end
    fake.update(hang=False)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert len(json.loads((Path(cfg.out_root) / "history.json").read_text())) == 1


async def test_the_nights_opt_in_runs_agent_member_calls_on_ray_through_the_pool(
    local_ray: Any, tmp_path: Path
) -> None:
    """``[night.executor] kind = "ray"``: the pool opened for a night sends each call of an
    agent CLI member to a Ray worker; the pool's errors and accounting are unchanged."""
    marks = tmp_path / "marks"
    marks.mkdir()
    # the agent notes its parent process: a Ray worker, not this process
    probe = f"awk '{{print $4}}' /proc/$PPID/stat >> {marks}/parents"
    fake = write_fake_cli(
        tmp_path / "bin",
        "codex",
        stdout=codex_events("x"),
        last_message="ANSWER:4",
        run_tools=[["sh", "-c", probe]],
    )
    pool = PoolConfig.model_validate(
        {
            "members": [{"kind": "codex", "name": "agent", "executable": str(fake.path)}],
            "roles": {"target": ["agent"], "optimizer": ["agent"]},
            "cache": {"enabled": False},
        }
    )
    night = SleepConfig.model_validate({"night": {"executor": {"kind": "ray"}}}).night
    request = CompletionRequest(role=Role.TARGET, prompt="Say FOUR", timeout=60)
    async with open_completer(pool, executor=night.executor) as stack:
        done = await stack.complete(request)
        fake.update(login_file="auth.json")  # "Not logged in" from now on
        with pytest.raises(BackendAuthError):
            await stack.complete(replace(request, prompt="again"))
        accounting = stack.accounting()
    assert done.text == "ANSWER:4" and done.member == "agent"
    parents = {int(p) for p in (marks / "parents").read_text().split()}
    assert parents and os.getpid() not in parents
    assert len(fake.calls()) == 2
    # the pool's own accounting: one answered call (with its tokens), one auth failure
    total = accounting["total"]
    assert (total["calls"], total["failed"], total["prompt_tokens"]) == (1, 1, 40), total
