"""The mcq and exec_check environments through the genuine agent CLIs, against the loopback
fake model server (as in test_cli_real): a short training run of each."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from skillopt.backends.base import Role
from skillopt.backends.cli.common import CliKind
from skillopt.backends.pool import BackendPool, MemberSpec
from skillopt.trainer.build import build_environment
from skillopt.trainer.config import TrainerConfig, load_trainer_config
from skillopt.trainer.dataset import bundled
from skillopt.trainer.demo import DemoWorld
from skillopt.trainer.envs.exec_check import ExecCheckEnvironment
from skillopt.trainer.envs.mcq import MCQEnvironment
from skillopt.trainer.loop import Trainer
from support.fake_agent_server import FakeAgentServer, Script
from support.real_cli import KINDS, installed, loopback_server, make_member
from support.trainer_fakes import pool_of

pytestmark = [pytest.mark.realcli, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
QUICK = [
    "train.num_epochs=1",
    "env.limit=2",
    "train.batch_size=2",
    "optimizer.use_slow_update=false",
    "optimizer.use_meta_skill=false",
    "evaluation.eval_test=false",
]
TOTALS = "region,total\\nnorth,10.00\\nsouth,5.50\\n"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeAgentServer]:
    """Answers like a position-biased model unless a prompt directs otherwise."""
    with loopback_server(Script(reply="The first option looks right.\n<answer>A</answer>")) as fake:
        yield fake


@pytest.fixture(params=KINDS, ids=[k.value for k in KINDS])
def kind(request: pytest.FixtureRequest) -> CliKind:
    return installed(request.param)


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli-homes")


def config(tmp_path: Path, demo: str, *extra: str) -> TrainerConfig:
    out = f"out_root={json.dumps(str(tmp_path / 'run'))}"
    return load_trainer_config(REPO / "configs/trainer" / demo, overrides=[out, *QUICK, *extra])


async def test_mcq_through_a_real_cli_target(
    kind: CliKind, server: FakeAgentServer, homes: Path, tmp_path: Path
) -> None:
    cfg = config(tmp_path, "mcq_demo.toml")
    env = MCQEnvironment(bundled("mcq_sample"), limit=2, seed=cfg.train.seed)
    member = make_member(kind, server.base_url, homes)
    pool = BackendPool({Role.TARGET: [MemberSpec(backend=member, max_concurrency=2, timeout=90)],
                        Role.OPTIMIZER: [MemberSpec(backend=DemoWorld())]})  # fmt: skip
    try:
        await Trainer(cfg, env, pool).run()
    finally:
        await member.aclose()
    rows = json.loads((tmp_path / "run/selection_eval_baseline/results.json").read_text())
    for row in rows["results"]:  # the CLI's reply went through: A as shown, mapped back
        assert row["extras"]["chosen"] == "A", row
        order = row["extras"]["order"]
        assert row["prediction"] == "ABCD"[order[0]]
        assert row["hard"] == (1.0 if row["prediction"] == row["extras"]["gold_original"] else 0.0)


def one_item_set(root: Path) -> Path:
    """One totals task per split, whose right answer is TOTALS."""
    root.mkdir(parents=True)
    shutil.copy(bundled("exec_sample") / "check_totals.py", root / "check_totals.py")
    item = {
        "id": "t1",
        "task_type": "csv_report",
        "instructions": "`sales.csv` lists sales as `region,amount`. Write `totals.csv` with "
        "the total per region, alphabetical, two decimals.",
        "files": {"sales.csv": "region,amount\nsouth,5.50\nnorth,4.00\nnorth,6.00\n"},
        "output": "totals.csv",
        "checker": "{python} {data_dir}/check_totals.py",
        "expected": {"header": ["region", "total"], "rows": [["north", 10.0], ["south", 5.5]]},
    }
    for split in ("train", "val", "test"):  # ids are unique across the splits
        (root / f"{split}.jsonl").write_text(json.dumps({**item, "id": f"t1-{split}"}) + "\n")
    return root


async def test_exec_check_through_a_real_cli_agent(
    kind: CliKind, server: FakeAgentServer, homes: Path, tmp_path: Path
) -> None:
    if kind is CliKind.COPILOT:  # no schema support: the plain last message is the answer
        reply = "FAKE_REPLY[<answer>wrote totals.csv</answer>]"
    else:
        reply = ('FAKE_REPLY[{"final_response": "<answer>wrote totals.csv</answer>", '
                 '"final_answer": "wrote totals.csv"}]')  # fmt: skip
    hint = f"FAKE_TOOL[printf '{TOTALS}' > totals.csv] {reply}"
    cfg = config(tmp_path, "exec_check_demo.toml")
    member = make_member(kind, server.base_url, homes, timeout=90)
    env = ExecCheckEnvironment(one_item_set(tmp_path / "data"), options={"agent_hint": hint},
                               backend=member)  # fmt: skip
    try:
        summary = await Trainer(cfg, env, pool_of(DemoWorld())).run()
    finally:
        await member.aclose()
    rows = json.loads((tmp_path / "run/selection_eval_baseline/results.json").read_text())
    (row,) = rows["results"]
    assert row["hard"] == 1.0, row["fail_reason"] + "\n" + row["trajectory"]
    assert "totals.csv" in row["trajectory"]
    assert summary["baseline_selection_hard"] == 1.0


async def test_a_rubric_judged_chat_run_through_a_real_cli_target(
    kind: CliKind, server: FakeAgentServer, homes: Path, tmp_path: Path
) -> None:
    """The rubric demo's items answered by a real CLI; the optimizer role judges."""
    cfg = config(tmp_path, "rubric_demo.toml")
    member = make_member(kind, server.base_url, homes)
    pool = BackendPool({Role.TARGET: [MemberSpec(backend=member, max_concurrency=2, timeout=90)],
                        Role.OPTIMIZER: [MemberSpec(backend=DemoWorld())]})  # fmt: skip
    try:
        await Trainer(cfg, build_environment(cfg), pool).run()
    finally:
        await member.aclose()
    rows = json.loads((tmp_path / "run/selection_eval_baseline/results.json").read_text())
    assert len(rows["results"]) == 2
    for row in rows["results"]:  # the CLI's reply reached the judge, which scored it
        assert "The first option looks right." in row["trajectory"], row
        assert row["fail_reason"].startswith("rubric: judged"), row
