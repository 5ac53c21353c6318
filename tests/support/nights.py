"""Three real demo nights of one project (mock model), for the report and MCP tests.

Night 1 and night 2 stage proposals; night 2's is adopted before night 3 runs, so the run
directories hold every proposal state: pending-but-stale (night 1: the live files moved on),
adopted (night 2), and whatever night 3 made of the adopted documents.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

from skillopt_sleep.cli import main
from skillopt_sleep.demo import prepare_demo
from skillopt_sleep.rundir import RunDir
from skillopt_sleep.state import project_dir
from support.sleep_setup import write_config


@dataclass(frozen=True, slots=True)
class Nights:
    root: Path
    config: Path
    project: Path
    project_dir: Path
    runs: list[Path]

    @property
    def args(self) -> list[str]:
        return ["--config", str(self.config), "--project", str(self.project)]


def _run(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    assert code == 0, out.getvalue()
    return out.getvalue()


def three_nights(root: Path) -> Nights:
    setup = prepare_demo(root)
    config = write_config(setup)
    args = ["--config", str(config), "--project", str(setup.project), "--log-level", "WARNING"]
    _run(["once", *args])
    _run(["once", *args])
    pdir = project_dir(setup.state_dir, setup.project)
    runs = RunDir.list_runs(pdir / "runs")
    _run(["adopt", *args, "--run", str(runs[-1])])
    _run(["once", *args])
    return Nights(
        root=root,
        config=config,
        project=setup.project,
        project_dir=pdir,
        runs=RunDir.list_runs(pdir / "runs"),
    )
