"""Three real demo nights of one project (mock model), for the report tests.

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
from skillopt_sleep.rundir import RunDir
from skillopt_sleep.state import project_dir


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
    """Three ``once --demo --state-dir ROOT`` (each continues the same demo), with night 2's
    proposal adopted (through the demo's own config) before night 3."""
    demo = ["once", "--demo", "--state-dir", str(root), "--log-level", "WARNING"]
    _run(demo)
    _run(demo)
    demo_root = root / "demo"  # where `--demo --state-dir ROOT` keeps the demo
    config, project = demo_root / "sleep.toml", (demo_root / "demo-project").resolve()
    pdir = project_dir(root, project)
    runs = RunDir.list_runs(pdir / "runs")
    _run(["adopt", "--config", str(config), "--project", str(project), "--run", str(runs[-1])])
    _run(demo)
    return Nights(
        root=root,
        config=config,
        project=project,
        project_dir=pdir,
        runs=RunDir.list_runs(pdir / "runs"),
    )
