"""`skillopt-sleep harvest --since/--reset` and `status` over a real archive and real
transcript files (mock pool: the heuristic miner, no model calls)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from skillopt_sleep.cli import main
from skillopt_sleep.config import load_sleep_config
from skillopt_sleep.night.gather_tasks import commit_gathered, gather_night
from skillopt_sleep.state import project_dir
from skillopt_sleep.tasks.archive import archive_path, open_archive
from support.sleep_setup import MOCK_POOL
from support.transcripts import Turn, write_claude_session

NOW = datetime.now(UTC)


@pytest.fixture
def env(tmp_path: Path) -> tuple[str, Path]:
    claude, project = tmp_path / "claude", tmp_path / "proj"
    project.mkdir()
    for i in range(3):
        write_claude_session(
            claude,
            cwd=project,
            turns=[Turn(user=f"Week-old request number {i} about the parser")],
            start=NOW - timedelta(days=7, hours=i),
            session_id=f"old{i}",
        )
    config = tmp_path / "sleep.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\n[sources]\nkinds = ["claude_code"]\n'
        f'claude_home = "{claude}"\n{MOCK_POOL}',
        encoding="utf-8",
    )
    return str(config), project


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out) if "--json" in argv else out


def test_since_widens_the_window_and_reset_harvests_again(
    env: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, project = env
    base = ("harvest", "--config", config, "--project", str(project))
    code, empty = _cli(capsys, *base, "--json")
    assert code == 0 and empty["tasks"] == [] and empty["outside_window"] == 3
    assert "older than the lookback window of 72h" in empty["why_nothing"]
    code, text = _cli(capsys, *base)
    assert "nothing to learn from: 3 session(s) are older" in text

    since = (NOW - timedelta(days=8)).date().isoformat()
    code, wide = _cli(capsys, *base, "--since", since, "--json")
    assert code == 0 and wide["n_sessions"] == 3 and len(wide["tasks"]) == 3
    assert wide["changes"] == [f"the harvest window now starts at {since}T00:00:00+00:00"]

    # The night commits; then nothing is pending, and `status` shows the archive.
    cfg = load_sleep_config(Path(config))
    db = archive_path(project_dir(cfg.state_path(), project))

    async def night() -> None:
        with open_archive(db) as archive:
            got = await gather_night(
                cfg, project=project, archive=archive, pool=None, use_llm=False, now=NOW
            )
            commit_gathered(archive, got, night=1, now=NOW)

    anyio.run(night)
    code, after = _cli(capsys, *base, "--json")
    assert after["n_sessions"] == 0 and after["n_recalled"] == 3
    code, status = _cli(capsys, "status", "--config", config, "--project", str(project), "--json")
    assert status["archive"]["tasks"] == 3 and status["archive"]["harvested_sessions"] == 3
    assert status["archive"]["backlog"] == 0 and status["archive"]["window_fixed"]
    code, text = _cli(capsys, "status", "--config", config, "--project", str(project))
    assert "task archive: 3 task(s): 3 active (3 not passing yet), 0 retired" in text
    assert "harvest: 3 session(s) harvested; backlog 0 pending after night 1" in text

    code, reset = _cli(capsys, *base, "--reset", "--since", since, "--json")
    assert reset["changes"][0] == (
        f"3 harvested session(s) changed after {since}T00:00:00+00:00 are pending again"
    )
    assert reset["n_sessions"] == 3


def test_status_before_any_night_creates_nothing(
    env: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, project = env
    code, text = _cli(capsys, "status", "--config", config, "--project", str(project))
    assert code == 0 and "task archive: none yet" in text
    cfg = load_sleep_config(Path(config))
    assert not archive_path(project_dir(cfg.state_path(), project)).exists()


def test_a_bad_date_is_refused(env: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, project = env
    code, out = _cli(
        capsys, "harvest", "--config", config, "--project", str(project), "--since", "soon",
        "--json",
    )  # fmt: skip
    assert code == 2 and "'soon' is not a date" in out["message"]


def test_a_night_that_harvests_nothing_says_why_and_how_to_widen_the_window(
    env: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, project = env
    base = ("--config", config, "--project", str(project))
    code, text = _cli(capsys, "once", *base)
    assert code == 0 and "no_tasks" in text and "sessions 0 -> tasks 0" in text
    assert "3 session(s) are older than the lookback window of 72h" in text
    assert "sources.lookback_hours" in text and "harvest --since" in text
    code, out = _cli(capsys, "once", *base, "--json")
    assert "older than the lookback window" in out["reason"]


def test_status_counts_the_moved_window_and_names_a_killed_night_plainly(
    env: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, project = env
    base = ("--config", config, "--project", str(project))
    assert _cli(capsys, "once", *base)[0] == 0
    _, text = _cli(capsys, "status", *base)
    assert "backlog 0 pending after night 1; 3 older than the window" in text
    since = (NOW - timedelta(days=8)).date().isoformat()
    assert _cli(capsys, "harvest", *base, "--since", since)[0] == 0
    _, text = _cli(capsys, "status", *base)
    assert "backlog 3 pending (counted by `harvest --since`); 0 older than the window" in text

    # a night killed mid-run (its run.json still says running, no lock held)
    cfg = load_sleep_config(Path(config))
    (run,) = (project_dir(cfg.state_path(), project) / "runs").iterdir()
    journal = json.loads((run / "run.json").read_text())
    journal.update(status="running", outcome=None, ended_at=None)
    (run / "run.json").write_text(json.dumps(journal))
    _, text = _cli(capsys, "status", *base)
    assert f"{run.name}: interrupted — its process is gone" in text and "None" not in text
