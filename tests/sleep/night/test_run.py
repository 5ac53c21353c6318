"""Whole nights with the deterministic mock backend, in temp directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skillopt.backends.mock import World
from skillopt.config import PoolConfig
from skillopt.errors import ConfigError
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, demo_pool, prepare_demo
from skillopt_sleep.night.entry import NightResult, run_night
from skillopt_sleep.night.learn.rounds import FINAL_RESERVE
from skillopt_sleep.rundir import RunStatus
from skillopt_sleep.state import StateStore

WORLD = World()
HARMFUL = next(r for r in WORLD.rules if r.harmful)
GOOD = [r for r in WORLD.rules if not r.harmful]


def _with(cfg: SleepConfig, **changes: Any) -> SleepConfig:
    data = cfg.model_dump(mode="json")
    for dotted, value in changes.items():
        node = data
        *path, last = dotted.split("__")
        for part in path:
            node = node[part]
        node[last] = value
    return SleepConfig.model_validate(data)


@pytest.fixture
def demo(tmp_path: Path) -> DemoSetup:
    return prepare_demo(tmp_path)


def _read(path: str) -> bytes:
    return Path(path).read_bytes()


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.slow
async def test_demo_night_keeps_good_rules_and_rejects_the_harmful_one(demo: DemoSetup) -> None:
    skill = demo.config.live_skill_path(demo.project)
    memory = demo.config.live_memory_path(demo.project)
    before = (skill.read_bytes(), memory.read_bytes())
    outcome = await run_night(demo.config, project=demo.project, demo=True)
    assert outcome.status is RunStatus.COMPLETE and outcome.exit_code == 0
    assert outcome.result is NightResult.ACCEPTED and outcome.accepted
    assert outcome.candidate is not None and outcome.baseline is not None
    assert outcome.candidate > outcome.baseline
    report = json.loads((outcome.run_dir / "report.json").read_text())
    accepted = {e["content"] for e in report["accepted_edits"]}
    rejected = {e["content"] for e in report["rejected_edits"]}
    untested = {c["edit"]["content"] for c in report["untested_edits"]}
    assert HARMFUL.text not in accepted and HARMFUL.text in rejected | untested
    assert accepted & {r.text for r in GOOD}
    # every edit was gated on its own; wherever the harmful one was measured it lost
    singles = [t for t in report["trials"] if t["kind"] == "single"]
    harmful_alone = [t for t in singles if t["edits"][0]["content"] == HARMFUL.text]
    assert harmful_alone and any(t["verdict"] == "rejected" for t in harmful_alone)
    # the live files are byte-identical; the proposal holds the accepted edits
    assert (skill.read_bytes(), memory.read_bytes()) == before
    manifest = json.loads((outcome.run_dir / "proposal" / "manifest.json").read_text())
    staged = "".join(
        (outcome.run_dir / e["proposed_file"]).read_text() for e in manifest["entries"]
    )
    assert all(text in staged for text in accepted) and HARMFUL.text not in staged
    # the run directory has the documented layout
    names = set(_files(outcome.run_dir))
    for name in (
        "run.json",
        "tasks.jsonl",
        "rollouts.jsonl",
        "trials.json",
        "diagnostics.json",
        "evidence.jsonl",
        "report.md",
        "report.json",
        "proposal/manifest.json",
    ):
        assert name in names, name
    run = json.loads((outcome.run_dir / "run.json").read_text())
    assert run["status"] == "complete" and all(s["status"] == "done" for s in run["stages"])
    md = (outcome.run_dir / "report.md").read_text()
    assert "## In short" in md and "night    1" in md and "█" in md
    state = StateStore(demo.config.state_path()).load(demo.project)
    assert state.night == 1 and state.history[0].accepted
    from skillopt_sleep.state import project_dir
    from skillopt_sleep.tasks.archive import archive_path, open_archive

    with open_archive(archive_path(project_dir(demo.config.state_path(), demo.project))) as a:
        assert a.stats().harvested_sessions == 16  # every session is now harvested


@pytest.mark.slow
async def test_rollouts_have_distinct_samples_and_fresh_final(demo: DemoSetup) -> None:
    outcome = await run_night(demo.config, project=demo.project, demo=True)
    assert outcome.run_dir is not None
    rows = [json.loads(x) for x in (outcome.run_dir / "rollouts.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["phase"] == "rollout"]
    per_task: dict[str, set[int]] = {}
    for r in train:
        per_task.setdefault(r["task_id"], set()).add(r["sample_id"])
    assert per_task and all(s == {0, 1, 2} for s in per_task.values())
    gated = [r for r in rows if r["phase"] in ("trial", "union", "final")]
    assert gated and all(r["fresh"] for r in gated)  # the gate never reads a cached reply
    finals = [r for r in rows if r["phase"] == "final"]
    assert outcome.spend["calls_by_stage"].get("final", 0) == len(finals)


async def test_unchanged_skill_rejects_on_a_tie(demo: DemoSetup) -> None:
    skill = demo.config.live_skill_path(demo.project)
    skill.write_text(skill.read_text() + "".join(f"- {r.text}\n" for r in GOOD))
    outcome = await run_night(demo.config, project=demo.project, demo=True)
    assert outcome.status is RunStatus.COMPLETE
    assert not outcome.accepted and outcome.gate_action == "reject"
    assert outcome.candidate == outcome.baseline
    assert outcome.proposal_dir is None
    report = json.loads((outcome.run_dir / "report.json").read_text())
    assert report["no_edit_reasons"]


async def test_every_call_failing_is_a_failed_night(demo: DemoSetup) -> None:
    pool = demo_pool().model_dump(mode="json")
    pool["members"][0]["options"] = {"fail_stages": ["*"]}
    pool["retry"] = {"max_attempts": 1, "base_delay": 0}
    cfg = _with(
        demo.config,
        pool=PoolConfig.model_validate(pool).model_dump(mode="json"),
        budget__outage_patience_seconds=0,  # a lasting outage: fail, do not wait it out
    )
    outcome = await run_night(cfg, project=demo.project)
    assert outcome.status is RunStatus.FAILED and outcome.exit_code == 1
    assert outcome.failed_stage == "rollouts" and "every model call failed" in outcome.reason
    diag = json.loads((outcome.run_dir / "diagnostics.json").read_text())
    assert diag["failed_stage"] == "rollouts" and diag["rollout_errors"]
    assert "every model call failed" in (outcome.run_dir / "report.md").read_text()
    state = StateStore(demo.config.state_path()).load(demo.project)
    assert not state.history  # a failed night commits nothing: the same sessions next time


async def test_a_judge_outage_says_the_judge_failed_not_every_model_call(
    demo: DemoSetup,
) -> None:
    pool = demo_pool().model_dump(mode="json")
    pool["members"][0]["options"] = {"fail_stages": ["judge"]}
    pool["retry"] = {"max_attempts": 1, "base_delay": 0}
    cfg = _with(
        demo.config,
        pool=PoolConfig.model_validate(pool).model_dump(mode="json"),
        budget__outage_patience_seconds=0,
    )
    outcome = await run_night(cfg, project=demo.project)
    assert outcome.status is RunStatus.FAILED and outcome.failed_stage == "rollouts"
    assert "every model call failed" not in outcome.reason
    assert "every judge call failed" in outcome.reason and "answers came back" in outcome.reason


async def test_budget_cap_stops_cleanly(demo: DemoSetup) -> None:
    cfg = _with(demo.config, budget__max_calls=30)
    outcome = await run_night(cfg, project=demo.project)
    assert outcome.result is NightResult.BUDGET_REACHED and outcome.exit_code == 0
    assert not outcome.accepted and outcome.proposal_dir is None
    assert outcome.spend["budget_reached"] == "calls" and outcome.spend["calls"] <= 30
    assert "budget reached" in (outcome.run_dir / "report.md").read_text()


@pytest.mark.slow
async def test_a_budget_running_out_mid_round_keeps_what_earlier_rounds_gated(
    demo: DemoSetup,
) -> None:
    # One edit per reflection and two folds: round 1 learns, later rounds are still tried.
    cfg = _with(demo.config, night__edit_budget=1, night__rounds=6, night__folds=2,
                night__evolve_memory=False)  # fmt: skip
    free = await run_night(cfg, project=demo.project, dry_run=True)
    stages = json.loads((free.run_dir / "run.json").read_text())["stages"]
    calls = {s["name"]: int(s.get("model_calls") or 0) for s in stages}
    assert any(n.startswith("round2.") for n in calls) and free.accepted
    # Room for round 1 and the reserve held back for the final check, not for every round.
    upto = [s["name"] for s in stages][: max(i for i, s in enumerate(stages)
                                             if s["name"].startswith("round1.")) + 1]  # fmt: skip
    cap = sum(calls[n] for n in upto) + FINAL_RESERVE * calls["rollouts"] + 10
    assert free.spend["calls"] > cap
    capped = await run_night(_with(cfg, budget__max_calls=cap), project=demo.project)
    # Without the reserve, the night stopped in a later round and lost what round 1 gated.
    # The best gated documents are staged; the night says the budget cut it short (exit 0).
    assert capped.result is NightResult.BUDGET_REACHED and capped.accepted, capped.reason
    assert capped.exit_code == 0 and capped.proposal_dir is not None
    assert capped.reason.startswith(f"budget.max_calls = {cap} reached"), capped.reason
    assert "did not finish" in capped.reason and "went to the final check" in capped.reason
    assert capped.spend["calls"] <= cap and not capped.spend["budget_reached"]
    report = json.loads((capped.run_dir / "report.json").read_text())
    assert any("the rounds stopped during" in note for note in report["notes"]), report["notes"]


@pytest.mark.slow
async def test_dry_run_stages_nothing_and_keeps_state(demo: DemoSetup) -> None:
    outcome = await run_night(demo.config, project=demo.project, dry_run=True)
    assert outcome.accepted and outcome.proposal_dir is None
    assert not (outcome.run_dir / "proposal").exists()
    assert not StateStore(demo.config.state_path()).path_for(demo.project).exists()


@pytest.mark.slow
async def test_second_night_recalls_the_archive_instead_of_new_sessions(demo: DemoSetup) -> None:
    first = await run_night(demo.config, project=demo.project)
    second = await run_night(demo.config, project=demo.project)
    assert first.accepted and second.n_sessions == 0
    report = json.loads((second.run_dir / "report.json").read_text())
    assert report["tasks"]["recalled"] == report["tasks"]["total"] == first.n_tasks
    assert [p["night"] for p in report["chart"]] == [1, 2]


@pytest.mark.slow
async def test_planted_secret_is_redacted_everywhere(demo: DemoSetup) -> None:
    secret = "sk-proj-" + "A1b2C3d4" * 5
    transcript = next((demo.claude_home / "projects").rglob("*.jsonl"))
    lines = transcript.read_text().splitlines()
    first = json.loads(lines[0])
    first["message"]["content"] += f" my key is {secret} and \x1b[31mred\x1b[0m"
    lines[0] = json.dumps(first)
    lines.insert(1, "{not json")
    transcript.write_text("\n".join(lines) + "\n")
    outcome = await run_night(demo.config, project=demo.project)
    assert outcome.run_dir is not None
    for name, data in _files(demo.config.state_path()).items():
        assert secret.encode() not in data, name
        assert b"\x1b[31m" not in data, name
    diag = json.loads((outcome.run_dir / "diagnostics.json").read_text())
    assert diag["gather"]["harvest"]["malformed_lines"] == 1


class EditLiveAt:
    """A progress sink that edits the live skill when a stage starts (a user at work)."""

    def __init__(self, stage: str, path: Path) -> None:
        self.at, self.path = stage, path

    def stage(self, name: str) -> None:
        if name == self.at:
            self.path.write_text(self.path.read_text() + "- edited during the night\n")

    def calls_planned(self, n: int) -> None: ...

    def call_done(self, *, ok: bool, cached: bool = False) -> None: ...

    def note(self, message: str) -> None: ...

    def close(self) -> None: ...


@pytest.mark.slow
async def test_live_file_changed_during_the_night_refuses_staging(demo: DemoSetup) -> None:
    live = demo.config.live_skill_path(demo.project)
    progress = EditLiveAt("final", live)
    outcome = await run_night(demo.config, project=demo.project, progress=progress)
    # the first stage to begin after the edit stops the night (the top-up, else staging)
    assert outcome.status is RunStatus.FAILED and outcome.failed_stage in ("steady", "stage")
    assert "changed" in outcome.reason and outcome.exit_code == 1
    assert not (outcome.run_dir / "proposal" / "manifest.json").exists()
    assert live.read_text().endswith("- edited during the night\n")
    assert not list((demo.state_dir / "projects").glob("*/skills/*/versions/*.md"))


@pytest.mark.slow
async def test_test_split_is_scored_after_the_decision_only(demo: DemoSetup) -> None:
    cfg = _with(demo.config, night__test_fraction=0.3)
    outcome = await run_night(cfg, project=demo.project)
    report = json.loads((outcome.run_dir / "report.json").read_text())
    tasks = [json.loads(x) for x in (outcome.run_dir / "tasks.jsonl").read_text().splitlines()]
    test_ids = {t["id"] for t in tasks if t["split"] == "test"}
    assert test_ids and report["test"]["n"] == len(test_ids)
    assert outcome.test_score == report["test"]["score"]
    rows = [json.loads(x) for x in (outcome.run_dir / "rollouts.jsonl").read_text().splitlines()]
    # scored after the decision only (and topped up for the next night once it is made)
    assert {r["phase"] for r in rows if r["task_id"] in test_ids} - {"steady"} == {"test"}
    assert "## Test split" in (outcome.run_dir / "report.md").read_text()


@pytest.mark.slow
async def test_auto_adopt_replaces_the_live_files_with_the_proposal(demo: DemoSetup) -> None:
    cfg = _with(demo.config, auto_adopt=True)
    outcome = await run_night(cfg, project=demo.project)
    assert outcome.accepted and outcome.proposal_dir is not None
    manifest = json.loads((outcome.proposal_dir / "manifest.json").read_text())
    for entry in manifest["entries"]:
        staged = (outcome.run_dir / entry["proposed_file"]).read_bytes()
        assert _read(entry["live_path"]) == staged
    report = json.loads((outcome.run_dir / "report.json").read_text())
    assert len(report["auto_adopted"]) == len(manifest["entries"])


@pytest.mark.slow
async def test_auto_adopt_writes_only_under_the_configured_roots(demo: DemoSetup) -> None:
    skills = str(demo.claude_home / "skills")
    cfg = _with(demo.config, auto_adopt=True, skill_roots=[skills])  # the project is not one
    before = _files(demo.project)
    # the memory (in the project) could never be adopted: refused before anything is spent
    with pytest.raises(ConfigError) as refused:
        await run_night(cfg, project=demo.project)
    assert refused.value.key == "memory_path" and "`skill_roots`" in str(refused.value)
    assert not list(demo.state_dir.glob("projects/*/runs/*"))
    skill_only = _with(cfg, night__evolve_memory=False)
    outcome = await run_night(skill_only, project=demo.project)
    assert outcome.accepted and outcome.proposal_dir is not None
    report = json.loads((outcome.run_dir / "report.json").read_text())
    assert report["auto_adopted"] == [str(cfg.live_skill_path(demo.project))]
    assert _files(demo.project) == before


async def test_a_single_task_night_is_not_validated(demo: DemoSetup) -> None:
    from datetime import UTC, datetime

    from skillopt.types import TaskRecord
    from skillopt_sleep.mining.tasks_file import write_tasks_file

    path = demo.root / "one.json"
    task = TaskRecord(id="only", intent="Where is the retry delay computed? Which file?")
    write_tasks_file(path, [task], generated_at=datetime.now(UTC))
    outcome = await run_night(demo.config, project=demo.project, tasks_file=path)
    assert outcome.result is NightResult.NO_EDITS and not outcome.accepted
    assert outcome.proposal_dir is None
    said = (outcome.run_dir / "report.md").read_text()
    assert "cross-fitting needs at least two tasks" in said
    # a tasks-file night read no agent session (issue 31: it said "read 12 new agent session(s)")
    assert "read the tasks file" in said and "agent session" not in said


@pytest.mark.slow
async def test_a_skill_from_the_reference_tool_keeps_one_learned_block(demo: DemoSetup) -> None:
    from skillopt.skilldoc import Region, region_spans

    skill = demo.config.live_skill_path(demo.project)
    skill.write_text(
        skill.read_text()
        + "\n<!-- SKILLOPT-SLEEP:LEARNED START -->\n- Prefer small, focused commits.\n"
        "<!-- SKILLOPT-SLEEP:LEARNED END -->\n"
    )
    outcome = await run_night(demo.config, project=demo.project)
    assert outcome.accepted and outcome.proposal_dir is not None
    report = json.loads((outcome.run_dir / "report.json").read_text())
    assert any("migrated" in n for n in report["notes"])
    manifest = json.loads((outcome.proposal_dir / "manifest.json").read_text())
    entry = next(e for e in manifest["entries"] if e["kind"] == "skill")
    staged = (outcome.run_dir / entry["proposed_file"]).read_text()
    assert "SKILLOPT-SLEEP:LEARNED" not in staged
    assert len(region_spans(staged, Region.LEARNED)) == 1
    assert "Prefer small, focused commits." in staged


async def test_a_tasks_file_night_counts_no_session_read(demo: DemoSetup) -> None:
    """The file's ``n_sessions`` says where its tasks came from, not what tonight read: a
    night that keeps nothing leaves no session of it pending (issue 31: its report said
    sessions were read, and its backlog counted them)."""
    from datetime import UTC, datetime

    from skillopt.types import TaskRecord
    from skillopt_sleep.mining.tasks_file import write_tasks_file

    path = demo.root / "mined.json"
    task = TaskRecord(id="only", intent="Where is the retry delay computed? Which file?")
    write_tasks_file(path, [task], generated_at=datetime.now(UTC), metadata={"n_sessions": 12})
    outcome = await run_night(demo.config, project=demo.project, tasks_file=path, dry_run=True)
    report = json.loads((outcome.run_dir / "report.json").read_text())
    assert report["n_sessions"] == 0 and outcome.n_sessions == 0
    assert report["harvest"]["backlog"] == 0
