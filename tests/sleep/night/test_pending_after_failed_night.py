"""A night that keeps nothing leaves every session it read pending: its report and
``status`` say the same count.

Before: a failed night's report said "waiting for later nights (backlog): N" (the sessions
the harvest left unread) while ``status`` said "backlog 0 pending" (the archive's count is
written only when a night commits), and neither counted the sessions read that night,
which a failed night does not consume either.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt.config import PoolConfig
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, demo_pool, prepare_demo
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.rundir import RunStatus
from skillopt_sleep.state import project_dir
from skillopt_sleep.tasks.archive import archive_path, open_archive
from support.sleep_setup import run_cli, write_config

READ_PER_NIGHT = 5


@pytest.fixture
def demo(tmp_path: Path) -> DemoSetup:
    return prepare_demo(tmp_path)


def _config(demo: DemoSetup, *, fail: bool) -> SleepConfig:
    pool = demo_pool().model_dump(mode="json")
    if fail:
        pool["members"][0]["options"] = {"fail_stages": ["reflect", "reflect_contrastive"]}
    pool["retry"] = {"max_attempts": 1, "base_delay": 0}
    data = demo.config.model_dump(mode="json")
    data["pool"] = PoolConfig.model_validate(pool).model_dump(mode="json")
    data["sources"]["max_sessions"] = READ_PER_NIGHT
    data["budget"]["outage_patience_seconds"] = 0
    return SleepConfig.model_validate(data)


def _archived_backlog(cfg: SleepConfig, project: Path) -> int:
    with open_archive(archive_path(project_dir(cfg.state_path(), project))) as archive:
        return archive.stats().backlog


async def test_a_failed_night_leaves_every_session_pending_and_status_says_so(
    demo: DemoSetup,
) -> None:
    sessions = len(list(demo.claude_home.rglob("*.jsonl")))
    assert sessions > READ_PER_NIGHT
    cfg = _config(demo, fail=True)
    outcome = await run_night(cfg, project=demo.project)
    assert outcome.status is RunStatus.FAILED and outcome.run_dir is not None
    report = json.loads((outcome.run_dir / "report.json").read_text())
    assert report["harvest"]["backlog"] == sessions  # nothing consumed
    assert _archived_backlog(cfg, demo.project) == sessions
    assert (
        f"waiting for later nights (backlog): {sessions}"
        in (outcome.run_dir / "report.md").read_text()
    )


async def test_a_complete_night_leaves_the_unread_sessions_pending(demo: DemoSetup) -> None:
    sessions = len(list(demo.claude_home.rglob("*.jsonl")))
    cfg = _config(demo, fail=False)
    outcome = await run_night(cfg, project=demo.project)
    assert outcome.status is RunStatus.COMPLETE and outcome.run_dir is not None
    report = json.loads((outcome.run_dir / "report.json").read_text())
    assert report["harvest"]["backlog"] == sessions - READ_PER_NIGHT
    assert _archived_backlog(cfg, demo.project) == sessions - READ_PER_NIGHT


FAILING_POOL = """
[[pool.members]]
kind = "mock"
name = "mock"
max_concurrency = 16
options = { fail_stages = ["reflect", "reflect_contrastive"] }

[pool.retry]
max_attempts = 1
base_delay = 0

[pool.roles]
target = ["mock"]
optimizer = ["mock"]
"""


def test_status_says_the_failed_nights_count(
    demo: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    """``once`` fails (exit 1), then ``status`` counts every session as still pending."""
    sessions = len(list(demo.claude_home.rglob("*.jsonl")))
    config = write_config(demo, pool=FAILING_POOL, extra="[budget]\noutage_patience_seconds = 0\n")
    base = ("--config", str(config), "--project", str(demo.project))
    code, night = run_cli(capsys, "once", *base, "--json")
    assert code == 1 and night["status"] == "failed", night
    code, text = run_cli(capsys, "status", *base)
    assert code == 0
    assert f"backlog {sessions} pending (counted by night 1, which kept nothing)" in text, text
