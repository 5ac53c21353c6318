"""Cross-fitted nights: leak-free validation, every task held out, untested edits carried,
paired decisions with their numbers, learning that does not stop at a saturated split."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from skillopt.backends.mock import World
from skillopt.gate import GateConfig
from skillopt.types import EditRecord, TaskRecord
from skillopt_sleep.config import NightSettings, SleepConfig
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.mining.tasks_file import write_tasks_file
from skillopt_sleep.night.entry import NightResult, run_night
from skillopt_sleep.night.learn.crossfit import (
    ATTRIBUTE,
    FINAL,
    MASK,
    ROUND,
    Candidate,
    merge_same,
    next_samples,
)
from skillopt_sleep.night.learn.folds import assign_folds
from skillopt_sleep.rundir import RunStatus

WORLD = World()
RULES = {r.key: r for r in WORLD.rules}
HARMFUL = next(r for r in WORLD.rules if r.harmful)


@pytest.fixture
def demo(tmp_path: Path) -> DemoSetup:
    return prepare_demo(tmp_path)


def _config(demo: DemoSetup, *, night: dict[str, Any] | None = None, **options: Any) -> SleepConfig:
    data = demo.config.model_dump(mode="json")
    data["night"].update(night or {})
    if options:
        data["pool"]["members"][0]["options"] = options
    return SleepConfig.model_validate(data)


def _report(outcome: Any) -> dict[str, Any]:
    return json.loads((outcome.run_dir / "report.json").read_text())


def _singles(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in report["trials"] if t["kind"] == "single"]


def _tasks_file(demo: DemoSetup, intents: list[str]) -> Path:
    path = demo.root / "tasks.json"
    tasks = [TaskRecord(id=f"t{i:02d}", intent=text) for i, text in enumerate(intents)]
    write_tasks_file(path, tasks, generated_at=datetime.now(UTC))
    return path


@pytest.mark.slow
async def test_no_edit_is_validated_on_a_task_its_reflection_saw(demo: DemoSetup) -> None:
    outcome = await run_night(demo.config, project=demo.project)
    singles = _singles(_report(outcome))
    assert singles
    for trial in singles:
        decision = trial["decision"]
        if decision is None:
            continue
        validated = set(decision["arithmetic"]["validated_on"])
        assert validated and not validated & set(trial["seen"]), trial["name"]
        assert not decision["leaked"]


@pytest.mark.slow
async def test_every_learnable_task_is_held_out_evidence_tonight(demo: DemoSetup) -> None:
    outcome = await run_night(demo.config, project=demo.project)
    report = _report(outcome)
    folds: dict[str, int] = report["folds"]
    assert set(folds) == set(report["task_intents"])
    sizes = Counter(folds.values())
    assert len(sizes) == report["tasks"]["folds"] == demo.config.night.folds
    assert max(sizes.values()) - min(sizes.values()) <= 1
    validated = {
        tid
        for t in _singles(report)
        if t["decision"] and t["fold"] >= 0
        for tid in t["decision"]["arithmetic"]["validated_on"]
    }
    assert validated == set(folds)
    for t in _singles(report):
        if t["decision"]:
            # its own fold, and every other fold whose reflection proposed the same edit
            own = {tid for tid, f in folds.items() if f == t["fold"]}
            expected = set(folds) - set(t["seen"])
            assert own <= expected == set(t["decision"]["arithmetic"]["validated_on"])


async def test_folds_are_reshuffled_from_night_to_night(demo: DemoSetup) -> None:
    from skillopt_sleep.night.learn.folds import assign_folds

    ids = [f"task-{i}" for i in range(24)]
    first = assign_folds(ids, n_folds=3, seed=42, rotation=1)
    second = assign_folds(ids, n_folds=3, seed=42, rotation=2)
    assert first != second and sorted(Counter(first.values()).values()) == [8, 8, 8]
    assert assign_folds(ids, n_folds=3, seed=42, rotation=1) == first


async def test_an_edit_no_held_out_task_needs_is_untested_and_carried(demo: DemoSetup) -> None:
    # one task needs the changelog rule: every reflection that proposes it saw that task,
    # so the folds it is validated on never exercise it
    path = _tasks_file(
        demo,
        [
            "Where is the retry delay computed?",
            "Where do we parse the config file?",
            "Which file defines the CLI entry point? Where is it?",
            "Fix the failing date parser test",
            "Fix the bug in the cache eviction",
            "Add a feature flag for the dark theme",
        ],
    )
    outcome = await run_night(
        _config(demo, night={"evolve_skill": False}), project=demo.project, tasks_file=path
    )
    report = _report(outcome)
    untested = {c["edit"]["content"] for c in report["untested_edits"]}
    rejected = {e["content"] for e in report["rejected_edits"]}
    rule = RULES["changelog"].text
    assert rule in untested and rule not in rejected
    verdicts = {t["verdict"] for t in _singles(report) if t["edits"][0]["content"] == rule}
    assert verdicts == {"untested"}
    assert outcome.gate_action == "untested" and not outcome.accepted
    carried = next(c for c in report["untested_edits"] if c["edit"]["content"] == rule)
    assert carried["seen"]  # what its reflection saw travels with it
    assert "untested" in (outcome.run_dir / "report.md").read_text().lower()


async def test_a_saturated_split_does_not_stop_learning(demo: DemoSetup) -> None:
    skill = demo.config.live_skill_path(demo.project)
    skill.write_text(skill.read_text() + f"- {RULES['cite'].text}\n- {RULES['tests'].text}\n")
    path = _tasks_file(
        demo,
        [
            "Where is the retry delay computed?",
            "Where do we parse the config file?",
            "Which file defines the CLI entry point? Where is it?",
            "Fix the failing date parser test",
            "Fix the bug in the cache eviction",
            "Where is the scheduler's next wake computed?",
            "Add a feature flag for the dark theme",
            "Rename the --verbose option to --debug",
            "Prepare the release of version 2.1",
            "Add the export feature to the reports page",
        ],
    )
    outcome = await run_night(
        _config(demo, night={"evolve_skill": False}), project=demo.project, tasks_file=path
    )
    report = _report(outcome)
    assert outcome.result is NightResult.ACCEPTED
    assert RULES["changelog"].text in {e["content"] for e in report["accepted_edits"]}


@pytest.mark.slow
async def test_every_decision_records_its_paired_statistics(demo: DemoSetup) -> None:
    outcome = await run_night(demo.config, project=demo.project)
    report = _report(outcome)
    decided = [t for t in report["trials"] if t["decision"] and t["kind"] != "leave_one_out"]
    assert decided
    for trial in decided:
        arithmetic = trial["decision"]["arithmetic"]
        assert arithmetic["mode"] == "paired" and "sign-flip" in arithmetic["method"]
        assert 0 <= arithmetic["p_improve"] <= 1 and arithmetic["confidence"] == 0.9
        assert arithmetic["n_pairs"] >= len(arithmetic["per_task"])
    final = next(t for t in report["trials"] if t["kind"] == "final")
    assert final["decision"]["arithmetic"]["per_edit_leak_check"]["leaked"] == []


@pytest.mark.slow
async def test_a_noisy_model_never_gets_the_harmful_rule_accepted(tmp_path: Path) -> None:
    """Six independent noisy nights (20% of answers flipped): the harmful generalisation,
    which looks good wherever nothing passes yet, is never accepted."""
    accepted_good = 0
    for seed in range(6):
        demo = prepare_demo(tmp_path / f"n{seed}")
        outcome = await run_night(_config(demo, flip=0.2, flip_seed=seed), project=demo.project)
        assert outcome.status is RunStatus.COMPLETE
        accepted = {e["content"] for e in _report(outcome)["accepted_edits"]}
        assert HARMFUL.text not in accepted, seed
        accepted_good += bool(accepted)
    assert accepted_good >= 4


async def test_a_noisy_night_tries_again_on_samples_of_its_own(tmp_path: Path) -> None:
    """A round that kept nothing ends a deterministic night, but not a noisy one: there
    the next round is an independent try, on rollouts and samples no round drew before."""
    intents = [  # each needs a skill rule; only the memory may change: nothing can help
        "Where is the retry delay computed?",
        "Where do we parse the config file?",
        "Fix the failing date parser test",
        "Fix the bug in the cache eviction",
    ]
    night = {"evolve_skill": False, "rounds": 3}
    calm = prepare_demo(tmp_path / "calm")
    outcome = await run_night(
        _config(calm, night={**night, "dream_rollouts": 1}),
        project=calm.project,
        tasks_file=_tasks_file(calm, intents),
    )
    assert "rounds 2-3 skipped: nothing changed" in _report(outcome)["notes"]

    noisy = prepare_demo(tmp_path / "noisy")
    outcome = await run_night(
        _config(noisy, night=night, flip=0.2, flip_seed=1),
        project=noisy.project,
        tasks_file=_tasks_file(noisy, intents),
    )
    assert outcome.status is RunStatus.COMPLETE and not outcome.accepted
    stages = {s["name"] for s in json.loads((outcome.run_dir / "run.json").read_text())["stages"]}
    assert {"round2.rollouts", "round3.rollouts"} <= stages
    rows = [json.loads(x) for x in (outcome.run_dir / "rollouts.jsonl").read_text().splitlines()]
    drawn = {r["sample_id"] for r in rows if r["phase"] == "rollout"}
    k = noisy.config.night.dream_rollouts
    assert drawn == {r * ROUND + i for r in range(3) for i in range(k)}


def test_sampling_goes_only_where_it_can_still_change_the_decision() -> None:
    config = GateConfig()
    up = {f"up{i}": ([0.0], [1.0]) for i in range(12)}

    def plan(pairs: dict[str, tuple[list[float], list[float]]]) -> list[str]:
        base = {t: b for t, (b, _) in pairs.items()}
        cand = {t: c for t, (_, c) in pairs.items()}
        return sorted(next_samples(base, cand, config=config))

    # a gain beyond doubt: only the task that lost a sample could hide a regression
    assert plan({**up, "lost": ([1.0], [0.0]), "same": ([1.0], [1.0])}) == ["lost"]
    # a pass, but not beyond doubt: every task whose samples disagree
    marginal = {k: up[k] for k in list(up)[:6]}
    assert plan({**marginal, "lost": ([1.0], [0.0])}) == sorted([*marginal, "lost"])
    # nothing lost on a pass, nothing moved, or already significantly worse: stop
    assert plan(up) == []
    assert plan({"same": ([1.0], [1.0])}) == []
    assert plan({f"down{i}": ([1.0], [0.0]) for i in range(12)}) == []
    # not significant yet: every task whose samples disagree
    assert plan({"up": ([0.0], [1.0]), "same": ([1.0], [1.0])}) == ["up"]
    # the final check (thin_tasks): also the tasks whose one agreeing pair may be luck on a
    # noisy comparison; a task agreeing on 4 pairs is settled
    base, cand = {"up": [0.0], "same": [1.0]}, {"up": [1.0], "same": [1.0]}
    assert sorted(next_samples(base, cand, config=config, thin_tasks=True)) == ["same", "up"]
    base["same"], cand["same"] = [1.0] * 4, [1.0] * 4
    assert next_samples(base, cand, config=config, thin_tasks=True) == ["up"]


def test_an_edit_several_folds_propose_is_tested_once_where_one_of_them_did_not_look() -> None:
    ids = [f"t{i}" for i in range(6)]
    fold0, fold1 = frozenset(ids[:3]), frozenset(ids[3:])
    rule = EditRecord(content="Run the checks.", rationale="three failures needed it")
    reworded = EditRecord(content="Run the checks. ", rationale="two other failures")
    other = EditRecord(content="Cite the source.")
    # the reflection of fold 0 saw fold 1's tasks and is validated on fold 0, and vice versa
    proposed = [
        Candidate(edit=rule, fold=0, seen=fold1, held_out=tuple(sorted(fold0))),
        Candidate(edit=other, fold=0, seen=fold1, held_out=tuple(sorted(fold0))),
        Candidate(edit=reworded, fold=1, seen=fold0, held_out=tuple(sorted(fold1))),
    ]
    merged = merge_same(proposed, ids)
    assert [c.edit for c in merged] == [rule, other]
    both, alone = merged
    assert both.held_out == tuple(ids) and both.seen == frozenset()
    assert both.motivated_from == fold0 | fold1  # what each reflection learned from
    assert alone == proposed[1]  # an edit one fold proposed keeps its own fold
    # three folds, two of them agree: held out wherever one of the two did not look
    three = [frozenset(ids[:2]), frozenset(ids[2:4]), frozenset(ids[4:])]
    a = Candidate(edit=rule, fold=0, seen=three[1] | three[2], held_out=tuple(sorted(three[0])))
    b = Candidate(edit=rule, fold=1, seen=three[0] | three[2], held_out=tuple(sorted(three[1])))
    (ab,) = merge_same([a, b], ids)
    assert ab.seen == three[2] and ab.held_out == tuple(ids[:4])


def test_the_default_folds_rarely_hide_every_task_a_rare_rule_helps() -> None:
    # A rule only 4 of 24 tasks need can be validated only if a reflection that saw some
    # of them proposes it while another of them is held out. With every one of the 4 in a
    # single fold, the folds that propose it hold none out: no held-out evidence exists,
    # and under noise such an edit reads as "not significant" every round. With two folds
    # that happens in ~9% of deals, with three in ~2%.
    ids = [f"task-{i:02d}" for i in range(24)]
    folds = NightSettings().folds
    deals = [assign_folds(ids, n_folds=folds, seed=42, rotation=r) for r in range(600)]
    hidden = sum(len({deal[t] for t in ids[:4]}) == 1 for deal in deals) / len(deals)
    assert hidden < 0.05


@pytest.mark.slow
async def test_a_union_that_lost_a_task_a_single_improved_is_attributed_on_a_noisy_model(
    tmp_path: Path,
) -> None:
    """On a model that flips answers too: a spoiler that only cancels the others' gains
    lets the union pass, and the lost task is the one sign of it. Every union of several
    edits that lost such a task (passed or not) is followed by its attribution, and the
    attribution draws samples of its own (none of the union's)."""
    attributed = 0
    for seed in range(4):
        demo = prepare_demo(tmp_path / f"n{seed}")
        outcome = await run_night(_config(demo, flip=0.2, flip_seed=seed), project=demo.project)
        trials = _report(outcome)["trials"]
        for i, trial in enumerate(trials):
            if trial["kind"] != "union" or len(trial["edits"]) < 2:
                continue
            if trial["note"].startswith("lost") or trial["verdict"] != "accepted":
                assert trials[i + 1]["kind"] == "leave_one_out", (seed, trial["note"])
                attributed += 1
        rows = [
            json.loads(x) for x in (outcome.run_dir / "rollouts.jsonl").read_text().splitlines()
        ]
        ids = {r["phase"]: set() for r in rows}
        for r in rows:
            ids[r["phase"]].add(r["sample_id"] % ROUND)
        own = (ATTRIBUTE, MASK)  # a union's attribution, or the masking test before it
        assert all(any(r <= k < r + 1000 for r in own) for k in ids.get("attribution", ())), (
            ids.get("attribution")
        )
    assert attributed


@pytest.mark.slow
async def test_the_final_check_draws_both_arms_anew(demo: DemoSetup) -> None:
    """The final check never reads back the samples of the union whose documents it checks
    (the night's first union is often its best): it asks for both arms, on ids of its own."""
    outcome = await run_night(demo.config, project=demo.project)
    report = _report(outcome)
    final = next(t for t in report["trials"] if t["kind"] == "final")
    rows = [json.loads(x) for x in (outcome.run_dir / "rollouts.jsonl").read_text().splitlines()]
    asked = [r for r in rows if r["phase"] == "final"]
    pairs = final["decision"]["arithmetic"]["n_pairs"]
    assert len(asked) == 2 * pairs  # every pair's two samples were asked for tonight
    assert all(FINAL <= r["sample_id"] < FINAL + 1000 for r in asked)
    others = {(r["task_id"], r["skill_hash"], r["memory_hash"], r["sample_id"])
              for r in rows if r["phase"] != "final"}  # fmt: skip
    assert not {(r["task_id"], r["skill_hash"], r["memory_hash"], r["sample_id"])
                for r in asked} & others  # fmt: skip
