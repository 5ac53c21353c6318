"""Issue 32 item 11: a handoff night's mining sittings are one run (resumed, one night
number), its first sitting says no model was called and that the sessions and tasks are
counted once mined, and `status` shows that one night with the prompts that wait now."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from skillopt.backends.handoff import read_pending, write_answer
from skillopt_sleep.cli import main
from skillopt_sleep.demo import prepare_demo
from skillopt_sleep.handoff import handoff_dir
from skillopt_sleep.state import project_dir
from support.handoff_agent import mined_nothing
from support.sleep_setup import write_config


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--log-level", "WARNING"])
    return code, out.getvalue()


def test_the_mining_sittings_of_a_handoff_night_are_one_run(tmp_path: Path) -> None:
    setup = prepare_demo(tmp_path)
    config = write_config(setup, pool='[pool]\nkind = "handoff"\n')
    flags = ["--config", str(config), "--project", str(setup.project)]
    where = handoff_dir(setup.config, setup.project)
    runs = project_dir(setup.state_dir, setup.project) / "runs"

    code, said = _run("once", *flags)
    assert code == 75 and "waiting for answers after harvest" in said
    assert "sessions 0 -> tasks 0" not in said and "counted once the mining prompts" in said
    assert "no model called: 0 answer(s) taken" in said and "model calls" not in said
    first, second = read_pending(where)
    assert first.stage == second.stage == "mine"

    write_answer(where, first.id, mined_nothing(first.prompt))
    code, said = _run("once", *flags)
    assert code == 75 and "(resumed)" in said and "1 answer(s) taken" in said
    assert [p.id for p in read_pending(where)] == [second.id]

    write_answer(where, second.id, mined_nothing(second.prompt))
    code, said = _run("once", *flags)
    assert code == 75 and "waiting for answers after rollouts" in said
    assert len(list(runs.iterdir())) == 1
    code, shown = _run("status", *flags, "--json")
    status = json.loads(shown)
    assert code == 0 and status["nights_run"] == 1
    (night,) = status["recent"]
    assert night["status"] == "waiting"
    assert f"{len(read_pending(where))} prompt(s) of rollouts" in night["reason"]
