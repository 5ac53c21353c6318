"""A state directory the night cannot write (issue 24, item 4): a full disk, a file-size
limit, a read-only or misplaced folder is said in one line naming the file, exit 2, never a
traceback; the first failure is the one reported, and the night resumes once it is fixed."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

import skillopt_sleep
from skillopt_sleep.cli import main
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.state import project_dir
from support.permissions import drop_file_override
from support.sleep_setup import write_config

_SRC = Path(skillopt_sleep.__file__).resolve().parents[1]


@pytest.fixture
def setup(tmp_path: Path) -> DemoSetup:
    return prepare_demo(tmp_path)


def _once(
    config: Path, project: Path, *, preexec: object = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLOPT_SLEEP__")}
    env["PYTHONPATH"] = str(_SRC)
    return subprocess.run(
        [sys.executable, "-m", "skillopt_sleep", "once", "--json", "--config", str(config),
         "--project", str(project)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
        preexec_fn=preexec,  # type: ignore[arg-type]
    )  # fmt: skip


def test_a_state_dir_under_a_file_is_said_not_raised(
    setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = setup.root / "not-a-folder"
    blocker.write_text("")
    config = write_config(setup)
    text = config.read_text().replace(str(setup.state_dir), str(blocker / "state"))
    config.write_text(text)
    code = main(["once", "--config", str(config), "--project", str(setup.project), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2 and out["error"] == "StorageError"
    assert "not a directory" in out["message"] and str(blocker) in out["message"]


def test_a_read_only_state_dir_names_the_file(setup: DemoSetup) -> None:
    config = write_config(setup)
    state = project_dir(setup.state_dir, setup.project)
    state.mkdir(parents=True)
    state.chmod(0o555)
    try:
        done = _once(config, setup.project, preexec=drop_file_override)
    finally:
        state.chmod(0o755)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert "permission denied" in out["message"] and str(state) in out["message"]


def _small_files() -> None:
    drop_file_override()
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))  # EFBIG past it, like ENOSPC


@pytest.mark.slow
def test_a_full_disk_mid_night_is_reported_first_and_the_night_resumes(setup: DemoSetup) -> None:
    config = write_config(setup)
    done = _once(config, setup.project, preexec=_small_files)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["error"] == "StorageError" and "file too large" in out["message"]
    runs = sorted((project_dir(setup.state_dir, setup.project) / "runs").iterdir())
    assert len(runs) == 1
    resumed = _once(config, setup.project)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    night = json.loads(resumed.stdout)
    assert night["run_id"] == runs[0].name and night["status"] == "complete"


FULL_DISK_NIGHT = Path(__file__).resolve().parents[1] / "support" / "full_disk_night.py"


@pytest.mark.slow
def test_the_abort_path_failing_too_never_hides_the_first_failure(setup: DemoSetup) -> None:
    """The disk fills mid-rollouts: the rollout write fails first, then the abort path's own
    ``run.json`` write; the user is told about the first, and the night resumes."""
    config = write_config(setup)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLOPT_SLEEP__")}
    env["PYTHONPATH"] = os.pathsep.join([str(_SRC), str(FULL_DISK_NIGHT.parents[1])])
    done = subprocess.run(
        [sys.executable, str(FULL_DISK_NIGHT), "4", "once", "--json", "--config", str(config),
         "--project", str(setup.project)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert "file too large" in out["message"] and "run.json" not in out["message"], out
    assert "night.end_not_recorded" in done.stderr  # the abort path's write failed as well
    resumed = _once(config, setup.project)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads(resumed.stdout)["status"] == "complete"
