"""The ``exec_check`` environment: work left in a workspace, scored by a checker program,
done by the target model (offline demo) or by an agent CLI (a fake codex executable)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from skillopt.errors import ConfigError, DataError
from skillopt.trainer.build import build_environment, open_environment
from skillopt.trainer.config import load_trainer_config
from skillopt.trainer.demo import DemoWorld
from skillopt.trainer.envs.base import RolloutContext
from skillopt.trainer.envs.exec_check import ExecCheckEnvironment
from skillopt.trainer.loop import Trainer
from skillopt.types import Split
from support.fake_cli import write_fake_cli
from support.trainer_fakes import pool_of

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "configs/trainer/exec_check_demo.toml"

# what a competent agent does in the workspace: sum sales.csv per group into totals.csv
SOLVE = """
import csv
rows = list(csv.reader(open("sales.csv")))
key, totals = rows[0][0], {}
for group, amount in rows[1:]:
    totals[group] = totals.get(group, 0.0) + float(amount)
lines = [f"{g},{t:.2f}" for g, t in sorted(totals.items())]
open("totals.csv", "w").write("\\n".join(([f"{key},total"] if HEADER else []) + lines) + "\\n")
"""


def codex_events(text: str) -> str:
    events = [
        {"type": "thread.started"},
        {"type": "item.completed",
         "item": {"type": "command_execution", "command": "cat task.md", "exit_code": 0}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": text}},
        {"type": "turn.completed", "usage": {"input_tokens": 40, "output_tokens": 5}},
    ]  # fmt: skip
    return "".join(json.dumps(e) + "\n" for e in events)


def agent_cfg(tmp_path: Path, *, header: bool, extra: tuple[str, ...] = ()) -> object:
    fake = write_fake_cli(
        tmp_path / "bin",
        "codex",
        stdout=codex_events("wrote totals.csv"),
        last_message=json.dumps({"final_response": "<answer>wrote totals.csv</answer>",
                                 "final_answer": "wrote totals.csv"}),
        run_tools=[[sys.executable, "-c", f"HEADER = {header}\n{SOLVE}"]],
    )  # fmt: skip
    pool_toml = tmp_path / "pool.toml"
    pool_toml.write_text(
        f'[[members]]\nkind = "codex"\nname = "agent"\nexecutable = "{fake.path}"\n'
        'max_concurrency = 2\ntimeout = 30\n[roles]\ntarget = ["agent"]\noptimizer = ["agent"]\n'
    )
    return load_trainer_config(
        DEMO,
        overrides=[
            f"out_root={json.dumps(str(tmp_path / 'run'))}",
            "backend.kind=pool",
            f"backend.pool_config={json.dumps(str(pool_toml))}",
            "env.exec_member=agent",
            "env.limit=2",
            *extra,
        ],
    )


async def test_the_offline_demo_learns_the_header_the_checker_wants(tmp_path: Path) -> None:
    out = f"out_root={json.dumps(str(tmp_path / 'run'))}"
    cfg = load_trainer_config(DEMO, overrides=[out, "env.limit=3"])
    env = build_environment(cfg)
    summary = await Trainer(cfg, env, pool_of(DemoWorld())).run()
    assert summary["baseline_test_hard"] == 0.0 and summary["test_hard"] == 1.0
    assert "header row" in (tmp_path / "run" / "best_skill.md").read_text()
    rows = json.loads((tmp_path / "run/selection_eval_baseline/results.json").read_text())
    first = rows["results"][0]
    assert first["fail_reason"].startswith("check_failed: exit 1: the first row is")
    assert 0.0 < first["soft"] < 1.0  # the checker's share of right rows
    assert "totals.csv" in first["trajectory"] and "sales.csv" in first["trajectory"]
    assert not list((tmp_path / "run").rglob("workspace"))  # removed after scoring


async def test_an_agent_cli_does_the_work_and_the_checker_reads_it(tmp_path: Path) -> None:
    cfg = agent_cfg(tmp_path, header=True, extra=("env.keep_workspace=true",))
    async with open_environment(cfg) as env:  # type: ignore[arg-type]
        item = env.items(Split.TRAIN)[0]
        ctx = RolloutContext(completer=DemoWorld(), timeout_s=20, max_output_tokens=64,
                             workdir=tmp_path / "work")  # fmt: skip
        result = await env.rollout(item, "Start CSV files with a header row.", ctx)
    assert result.hard == 1.0 and result.reason == "", result.reason
    assert result.response == "wrote totals.csv"
    workspace = tmp_path / "work" / "workspace"
    assert (workspace / "totals.csv").read_text().startswith("region,total\n")
    skill = workspace / ".agents/skills/skillopt-target/SKILL.md"
    assert "header row" in skill.read_text()
    assert "expected" not in (workspace / "task.md").read_text()  # the checker's data stays out
    assert "Read task.md: succeeded" in result.trajectory


async def test_a_run_with_an_agent_that_leaves_out_the_header(tmp_path: Path) -> None:
    quick = ("evaluation.eval_test=false", "optimizer.use_slow_update=false")
    cfg = agent_cfg(tmp_path, header=False, extra=quick)
    async with open_environment(cfg) as env:  # type: ignore[arg-type]
        summary = await Trainer(cfg, env, pool_of(DemoWorld())).run()  # type: ignore[arg-type]
    assert summary["baseline_selection_hard"] == 0.0
    rows = json.loads((tmp_path / "run/selection_eval_baseline/results.json").read_text())
    assert all("expected the header" in r["fail_reason"] for r in rows["results"])


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ({"id": "x"}, "'instructions'"),
        ({"id": "x", "instructions": "do", "files": ["a"]}, "'files' must be an object"),
        ({"id": "x", "instructions": "do", "files": {"../up": "t"}}, "relative path"),
        ({"id": "x", "instructions": "do", "files": {"a": 3}}, "'files'['a']"),
        ({"id": "x", "instructions": "do", "output": ""}, "'output'"),
        ({"id": "x", "instructions": "do", "files": {"a": {"path": "../b"}}}, "data directory"),
    ],
)
def test_bad_items_are_named_by_file_line_and_field(
    tmp_path: Path, row: dict[str, object], problem: str
) -> None:
    for split in ("train", "val", "test"):
        (tmp_path / f"{split}.jsonl").write_text("")
    (tmp_path / "train.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError, match=r"train\.jsonl:1: .*" + problem.replace("[", r"\[")):
        ExecCheckEnvironment(tmp_path)


def test_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"env\.options\.agent_hnt"):
        ExecCheckEnvironment(options={"agent_hnt": "x"})
    with pytest.raises(ConfigError, match=r"env\.options\.scorer"):
        ExecCheckEnvironment(options={"scorer": {"kind": "program", "timeout": 3}})
