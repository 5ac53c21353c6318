"""Run directories no longer grow for ever: the last N nights and every adopted night are
kept, and so is whatever a pending proposal, an adoption, the skill store or a resume needs.

Before: every night left its run directory (0.4-3 MB with tasks) for good; only earlier
no-task nights were pruned.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skillopt_sleep.adopt import adopt
from skillopt_sleep.adopt_journal import JOURNAL_NAME
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import prepare_demo
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.retention import RunFacts, apply_retention, plan_retention
from skillopt_sleep.rundir import RunDir, RunStatus
from skillopt_sleep.staging import Proposal, SkillStore, sha256_file, write_proposal

T0 = datetime(2026, 11, 1, 2, 30, tzinfo=UTC)


class Project:
    """A project's state directory with run directories made the way nights make them."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "state" / "projects" / "p-0123456789"
        self.runs = self.dir / "runs"
        self.live = root / "skills" / "s" / "SKILL.md"
        self.live.parent.mkdir(parents=True)
        self.live.write_text("# s\n")
        self.count = 0

    def night(self, status: RunStatus = RunStatus.COMPLETE, *, outcome: str = "rejected",
              resumable: bool = False, propose: bool = False) -> Path:  # fmt: skip
        self.count += 1
        run = RunDir.create(
            self.runs, now=T0 + timedelta(days=self.count), project="/p", project_key="p",
            config={}, config_hash="h", dry_run=False,
        )  # fmt: skip
        if propose:
            write_proposal(run.path, [Proposal(name="s", live_path=self.live,
                                               text=f"# s\nnight {self.count}\n",
                                               live_sha256=sha256_file(self.live))])  # fmt: skip
        run.update(resumable=resumable)
        if status is not RunStatus.RUNNING:
            run.finish(status, T0 + timedelta(days=self.count, hours=1), outcome=outcome)
        return run.path

    def adopt(self, run: Path) -> None:
        adopt(run, skill_roots=[str(self.live.parent.parent)])


def _left(project: Project) -> list[Path]:
    return RunDir.list_runs(project.runs)


def test_only_the_last_nights_and_what_is_still_needed_are_kept(tmp_path: Path) -> None:
    p = Project(tmp_path)
    adopted = p.night(outcome="accepted", propose=True)
    p.adopt(adopted)
    stale = p.night(outcome="accepted", propose=True)  # never adopted; superseded below
    interrupted = p.night(outcome="accepted", propose=True)
    p.adopt(interrupted)
    (interrupted / JOURNAL_NAME).write_text("{}")  # as a killed adoption leaves it
    old = [p.night() for _ in range(4)]
    empty_a = p.night(outcome="no_tasks")
    store_run = p.night(outcome="accepted", propose=True)
    SkillStore(p.dir).add_version("s", "# s\nv1\n", run_id=store_run.name, night=9)
    waiting = p.night(outcome="accepted", propose=True)  # the newest proposal: pending
    failed = p.night(RunStatus.FAILED, outcome="failed", resumable=True)
    empty_b = p.night(outcome="no_tasks")
    recent = [p.night() for _ in range(2)]
    tonight = p.night()
    before = _left(p)
    assert len(before) == 15

    deleted = apply_retention(p.runs, p.dir, keep_last=3, keep_adopted=True, current=tonight)
    left = _left(p)
    assert set(deleted) == set(before) - set(left)
    assert adopted in left and interrupted in left  # adopted / adoption to finish
    assert store_run in left and waiting in left and failed in left
    assert recent[-2:] == left[-3:-1] and tonight == left[-1]
    assert all(o not in left for o in old) and stale not in left
    assert empty_a not in left and empty_b not in left  # not among the last 3 either
    assert len(left) == 8


def test_keep_last_zero_keeps_every_run_but_earlier_empty_nights() -> None:
    runs = [RunFacts(path=Path(f"/r/{i}"), status="complete", outcome=o)
            for i, o in enumerate(["no_tasks", "rejected", "no_tasks", "accepted"])]  # fmt: skip
    plan = plan_retention(runs, keep_last=0, keep_adopted=True, current=None, store_run_ids=set())
    assert plan.delete == [Path("/r/0")]


def test_adopted_nights_go_too_when_not_kept_on_purpose() -> None:
    runs = [RunFacts(path=Path(f"/r/{i}"), status="complete", adopted=i == 0) for i in range(4)]
    keep = plan_retention(runs, keep_last=1, keep_adopted=True, current=None, store_run_ids=set())
    drop = plan_retention(runs, keep_last=1, keep_adopted=False, current=None, store_run_ids=set())
    assert Path("/r/0") in keep.keep and Path("/r/0") in drop.delete


def test_an_unreadable_run_is_never_deleted(tmp_path: Path) -> None:
    p = Project(tmp_path)
    broken = p.night()
    (broken / "run.json").write_text("{not json")
    for _ in range(3):
        p.night()
    apply_retention(p.runs, p.dir, keep_last=1, keep_adopted=True, current=None)
    assert broken in _left(p)


@pytest.mark.slow
async def test_a_night_applies_the_configured_retention(tmp_path: Path) -> None:
    setup = prepare_demo(tmp_path)
    data = setup.config.model_dump(mode="json")
    data["retention"] = {"keep_last": 2}
    cfg = SleepConfig.model_validate(data)
    first = await run_night(cfg, project=setup.project, dry_run=True)
    second = await run_night(cfg, project=setup.project, dry_run=True)
    third = await run_night(cfg, project=setup.project, dry_run=True)
    assert first.run_dir is not None and third.run_dir is not None
    left = RunDir.list_runs(third.run_dir.parent)
    assert left == [second.run_dir, third.run_dir]
    journal = json.loads((third.run_dir / "run.json").read_text())
    assert journal["status"] == "complete"
