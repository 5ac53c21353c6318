"""Whole training runs in-process: the demo world model behind a real BackendPool."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from skillopt.backends.base import Backend, CompletionRequest, Role
from skillopt.errors import BackendRequestError, ConfigError, CorruptStateError, RunFailedError
from skillopt.skilldoc import extract_slow_update
from skillopt.trainer.build import build_environment
from skillopt.trainer.config import TrainerConfig, load_trainer_config
from skillopt.trainer.demo import HARMFUL_RULE, RULES, DemoWorld
from skillopt.trainer.loop import Trainer
from support.trainer_fakes import FailingWrapper, Jitter, ScriptedBackend, pool_of

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs/trainer/qa_demo.toml"


def demo_cfg(out: Path, *extra: str) -> TrainerConfig:
    return load_trainer_config(
        DEMO, overrides=[f"out_root={json.dumps(str(out))}", "backend.demo_latency_s=0", *extra]
    )


async def train(cfg: TrainerConfig, backend: Backend) -> dict[str, Any]:
    async with pool_of(backend) as pool:
        return await Trainer(cfg, build_environment(cfg), pool).run()


def history(out: Path) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads((out / "history.json").read_text())
    return data


def tree(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != "timing.json"
    }


async def test_two_epoch_demo_run_gates_and_schedules(tmp_path: Path) -> None:
    out = tmp_path / "run"
    recorder = FailingWrapper(inner=DemoWorld(), fail=lambda _r: False)
    summary = await train(demo_cfg(out), recorder)
    hist = history(out)
    # 60 train items, batch 20 -> 3 steps per epoch, 6 in all; cosine 4 -> 2 over 6 steps
    assert [h["step"] for h in hist] == [1, 2, 3, 4, 5, 6]
    assert [h["epoch"] for h in hist] == [1, 1, 1, 2, 2, 2]
    assert [h["accumulation_batches"][0]["batch_seed"] for h in hist] == [
        1043,
        1044,
        1045,
        2043,
        2044,
        2045,
    ]
    assert [h.get("edit_budget") for h in hist[:4]] == [4, 4, 3, 2]
    actions = [h["action"] for h in hist]
    assert actions[:3] == ["accept_new_best", "accept_new_best", "reject"]
    # step 1's batch held the harmful edit and good fixes: the whole broke every val item,
    # so each edit was attributed; the harmful one was dropped and the fixes went in
    assert hist[0]["dropped_edits"] == [f"append: {HARMFUL_RULE}"]
    assert [a["dropped"] for a in hist[0]["attribution"]].count(True) == 1
    # each removal judged on what passes, as the night judges one
    assert {a["decision"]["scored_on"] for a in hist[0]["attribution"] if a["decision"]} == {
        "passes"
    }
    assert hist[0]["candidate_gate_score"] > summary["baseline_gate_score"]
    assert hist[1]["candidate_gate_score"] > hist[0]["candidate_gate_score"]
    # alone, the harmful edit is rejected outright
    assert hist[2]["candidate_gate_score"] == 0.0 and hist[2]["gate"]["harmful"]
    assert summary["total_rejects"] >= 1 and summary["total_accepts"] >= 1
    best = (out / "best_skill.md").read_text()
    assert HARMFUL_RULE not in best
    assert all(rule.text in best for rule in RULES.values())
    # slow update never touches best_skill, but the current skill carries the guidance
    assert extract_slow_update(best) == "" and "SLOW-UPDATE" not in best
    state = json.loads((out / "runtime_state.json").read_text())
    assert extract_slow_update((out / state["current_skill_path"]).read_text())
    # step 2's analysts saw step 1's rejected edit through the step buffer
    analyst_prompts = [r.prompt for r in recorder.calls if r.stage == "analyst"]
    assert any("rejected" in p and "restate the question" in p for p in analyst_prompts)
    assert summary["test_hard"] > summary["baseline_test_hard"]
    record = json.loads((out / "steps/step_0002/step_record.json").read_text())
    assert {"rollout_hard", "n_edits_ranked", "candidate_hash", "selection_hard", "tokens"} <= set(
        record
    )


@pytest.mark.slow
async def test_identical_replies_give_byte_identical_files(tmp_path: Path) -> None:
    await train(demo_cfg(tmp_path / "a"), DemoWorld())
    await train(demo_cfg(tmp_path / "b"), Jitter(inner=DemoWorld()))
    a, b = tree(tmp_path / "a"), tree(tmp_path / "b")
    assert a.keys() == b.keys() and len(a) > 50
    assert [k for k in a if a[k] != b[k]] == []


async def test_crash_mid_step_then_resume_matches_uninterrupted(tmp_path: Path) -> None:
    full = tmp_path / "full"
    await train(demo_cfg(full), DemoWorld())
    out = tmp_path / "crashy"
    # the first merge call of step 2 (its patches are on disk by then) fails fatally
    crashing = FailingWrapper(
        inner=DemoWorld(),
        fail=lambda r: r.stage == "merge" and (out / "steps/step_0002/patches").exists(),
    )
    with pytest.raises(BackendRequestError):
        await train(demo_cfg(out), crashing)
    state = json.loads((out / "runtime_state.json").read_text())
    assert state["last_completed_step"] == 1
    resumed = FailingWrapper(inner=DemoWorld(), fail=lambda _r: False)
    await train(demo_cfg(out), resumed)

    def strip(h: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "tokens"} for r in h]

    assert strip(history(out)) == strip(history(full))
    # step 2's saved patches were reused: no analyst call carried step 2's batch again
    full_hist = history(full)
    later = sum(h["tokens"].get("analyst", {}).get("calls", 0) for h in full_hist[2:])
    assert sum(1 for r in resumed.calls if r.stage == "analyst") == later


async def test_corrupt_state_is_an_error_naming_the_file(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = demo_cfg(out, "train.num_epochs=1", "evaluation.eval_test=false")
    await train(cfg, DemoWorld())
    (out / "runtime_state.json").write_text('{"last_completed_step": ')
    with pytest.raises(CorruptStateError, match=r"runtime_state\.json"):
        await train(cfg, DemoWorld())
    (out / "runtime_state.json").unlink()
    with pytest.raises(CorruptStateError, match=r"runtime_state\.json"):
        await train(cfg, DemoWorld())  # history exists: never a silent restart


async def test_secrets_never_reach_config_or_summary(tmp_path: Path) -> None:
    data = tmp_path / "api_key=hunter2hunter2secret"
    data.mkdir()
    bundled = build_environment(demo_cfg(tmp_path)).items
    from skillopt.trainer.envs.qa import bundled_data_dir

    for name in ("train", "val", "test"):
        (data / f"{name}.jsonl").write_text((bundled_data_dir() / f"{name}.jsonl").read_text())
    out = tmp_path / "run"
    await train(
        demo_cfg(out, f"env.data_dir={json.dumps(str(data))}", "train.num_epochs=1"), DemoWorld()
    )
    for name in ("config.json", "summary.json"):
        text = (out / name).read_text()
        assert "hunter2hunter2secret" not in text
        assert "REDACTED" in text
    assert bundled


async def test_gate_off_forces_candidates_but_best_only_improves(tmp_path: Path) -> None:
    out = tmp_path / "run"
    await train(
        demo_cfg(out, "gate.mode=off", "train.num_epochs=1", "evaluation.eval_test=false"),
        DemoWorld(),
    )
    hist = history(out)
    assert hist[0]["action"] == "force_accept"
    assert hist[0]["current_score"] == 0.0  # the harmful edit became current...
    assert hist[0]["best_score"] > 0.0 and hist[0]["best_step"] == 0  # ...but not best


async def test_identical_candidate_hits_the_cache_and_is_rejected(tmp_path: Path) -> None:
    skill = tmp_path / "skill.md"
    skill.write_text("Be brief.\n")

    def reply(request: CompletionRequest) -> str:
        if request.role is Role.TARGET:
            return "<answer>wrong</answer>"
        if request.stage == "analyst":
            edit = {"op": "append", "target": "", "content": "Be brief."}
            return json.dumps({"batch_size": 1, "patch": {"reasoning": "", "edits": [edit]}})
        return json.dumps({"reasoning": "", "edits": [{"op": "append", "content": "Be brief."}]})

    backend = ScriptedBackend(reply=reply)
    out = tmp_path / "run"
    cfg = demo_cfg(
        out,
        f"env.skill_init={json.dumps(str(skill))}",
        "train.num_epochs=1",
        "evaluation.eval_test=false",
        "optimizer.use_slow_update=false",
        "optimizer.use_meta_skill=false",
    )
    await train(cfg, backend)
    hist = history(out)
    assert [h["action"] for h in hist] == ["reject"] * 3
    assert all(h["selection_cached"] for h in hist)
    assert hist[0]["edit_apply_summary"]["applied"] == 0
    target_calls = sum(1 for r in backend.requests if r.role is Role.TARGET)
    assert target_calls == 30 + 60  # baseline val + train rollouts; no selection rollouts


async def test_rewrite_mode_and_skip_when_the_rewrite_is_unusable(tmp_path: Path) -> None:
    out = tmp_path / "run"
    await train(
        demo_cfg(
            out,
            "optimizer.update_mode=rewrite_from_suggestions",
            "train.num_epochs=1",
            "evaluation.eval_test=false",
        ),
        DemoWorld(),
    )
    hist = history(out)
    assert "accept_new_best" in [h["action"] for h in hist]
    assert (out / "steps/step_0002/rewrite_result.json").exists()

    def broken_rewrite(request: CompletionRequest) -> str:
        if request.stage == "rewrite":
            return '{"reasoning": "forgot the skill"}'
        raise AssertionError("unused")

    demo = DemoWorld()

    class RewriteBreaker(ScriptedBackend):
        async def complete(self, request: CompletionRequest):  # type: ignore[no-untyped-def]
            if request.stage == "rewrite":
                return await super().complete(request)
            return await demo.complete(request)

    out2 = tmp_path / "run2"
    # every step had edits to apply and no rewrite was usable: the run learned nothing
    with pytest.raises(RunFailedError, match="rewrite") as info:
        await train(
            demo_cfg(
                out2,
                "optimizer.update_mode=rewrite_from_suggestions",
                "train.num_epochs=1",
                "evaluation.eval_test=false",
                "optimizer.use_slow_update=false",
            ),
            RewriteBreaker(reply=broken_rewrite),
        )
    assert "new_skill: Field required" in info.value.cause
    hist2 = history(out2)
    assert hist2[0]["action"] == "skip_no_rewrite"
    assert hist2[0]["diagnostics"][0]["stage"] == "rewrite"
    assert hist2[0]["update_failed"]["stage"] == "rewrite"


async def test_resume_refuses_a_changed_batch_plan_but_allows_more_epochs(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    await train(demo_cfg(out, "train.num_epochs=1", "evaluation.eval_test=false"), DemoWorld())
    with pytest.raises(ConfigError, match=r"train\.batch_size"):
        await train(demo_cfg(out, "train.num_epochs=1", "train.batch_size=10"), DemoWorld())
    await train(demo_cfg(out, "train.num_epochs=2", "evaluation.eval_test=false"), DemoWorld())
    assert [h["step"] for h in history(out)] == [1, 2, 3, 4, 5, 6]
    # the budget schedule keeps the horizon the run started with (3 steps)
    assert all(h.get("edit_budget") in (None, 2) for h in history(out)[3:])


async def test_autonomous_budget_is_clamped_and_recorded(tmp_path: Path) -> None:
    out = tmp_path / "run"
    await train(
        demo_cfg(
            out,
            "optimizer.lr_control=autonomous",
            "train.num_epochs=1",
            "evaluation.eval_test=false",
        ),
        DemoWorld(),
    )
    gated = [h for h in history(out) if "lr_decision" in h]
    assert gated
    for h in gated:
        decision = h["lr_decision"]
        # the demo answers "<n-1> edits": coerced from text, within what was proposed
        assert decision["learning_rate"] == max(1, h["n_edits_merged"] - 1)
        assert h["edit_budget"] == decision["learning_rate"] == h["n_edits_ranked"]
        saved = json.loads((out / f"steps/step_{h['step']:04d}/lr_decision.json").read_text())
        assert saved == decision


def lapse_world(request: CompletionRequest) -> str:
    """The target knows the rule but follows it only with a reminder in the appendix."""
    if request.role is Role.TARGET:
        answers = request.metadata["qa_item"]["answers"]
        return (
            f"<answer>{answers[0] if 'Execution notes' in request.system else 'no idea'}</answer>"
        )
    if request.stage == "analyst":
        return json.dumps(
            {
                "batch_size": 4,
                "patch": {"reasoning": "lapse", "edits": []},
                "appendix_notes": [{"note": "Re-read the skill before answering."}],
            }
        )
    return json.dumps({"reasoning": "", "edits": []})


@pytest.mark.parametrize("skill_aware", [True, False])
async def test_skill_aware_notes_are_gated_with_the_candidate(
    tmp_path: Path, skill_aware: bool
) -> None:
    out = tmp_path / "run"
    cfg = demo_cfg(
        out,
        f"reflect.skill_aware={str(skill_aware).lower()}",
        "train.num_epochs=1",
        "evaluation.eval_test=false",
        "optimizer.use_slow_update=false",
        "optimizer.use_meta_skill=false",
    )
    await train(cfg, ScriptedBackend(reply=lapse_world))
    hist = history(out)
    best = (out / "best_skill.md").read_text()
    if skill_aware:
        assert hist[0]["action"] == "accept_new_best"
        assert hist[0]["n_appendix_notes_added"] == 1
        assert "Re-read the skill before answering." in best
        assert hist[1]["action"] == "reject"  # the same note again changes nothing: a tie
    else:
        assert [h["action"] for h in hist] == ["skip_no_patches"] * 3
        assert best == ""


async def test_meta_skill_reaches_later_analysts_but_never_the_target_or_rewrite(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    recorder = FailingWrapper(inner=DemoWorld(), fail=lambda _r: False)
    await train(
        demo_cfg(
            out,
            "train.num_epochs=3",
            "optimizer.update_mode=rewrite_from_suggestions",
            "evaluation.eval_test=false",
        ),
        recorder,
    )
    memory = "Prefer narrow formatting rules."
    meta = json.loads((out / "meta_skill/epoch_02/meta_skill_result.json").read_text())
    assert memory in meta["meta_skill_content"]
    first = json.loads((out / "meta_skill/epoch_01/meta_skill_result.json").read_text())
    assert first["action"] == "skip_first_epoch"
    analyst = [r.prompt for r in recorder.calls if r.stage == "analyst"]
    assert any(memory in p for p in analyst)
    assert not any(memory in p for p in analyst[:10])  # epochs 1 and 2 had no memory yet
    assert not any(memory in r.prompt for r in recorder.calls if r.stage == "rewrite")
    assert not any(memory in r.system for r in recorder.calls if r.role is Role.TARGET)


async def test_a_secret_in_the_initial_skill_is_redacted_everywhere(tmp_path: Path) -> None:
    skill = tmp_path / "skill.md"
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2"
    skill.write_text(f"Use key {secret} for lookups.\n")
    recorder = FailingWrapper(inner=DemoWorld(), fail=lambda _r: False)
    out = tmp_path / "run"
    await train(
        demo_cfg(out, f"env.skill_init={json.dumps(str(skill))}", "train.num_epochs=1"), recorder
    )
    assert secret not in (out / "skills/skill_v0000.md").read_text()
    for path in out.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path
    assert not any(secret in r.text_for_key() for r in recorder.calls)


@pytest.mark.parametrize("policy", ["mixed", "changed"])
async def test_comparison_pairs_and_changed_policy_top_up(tmp_path: Path, policy: str) -> None:
    out = tmp_path / "run"
    await train(
        demo_cfg(out, f"optimizer.pair_policy={policy}", "evaluation.eval_test=false"),
        DemoWorld(),
    )
    edir = out / "slow_update/epoch_02"
    pairs = json.loads((edir / "comparison_pairs.json").read_text())
    if policy == "mixed":
        assert len(pairs) == 10  # slow_update_samples
        assert {p["category"] for p in pairs} <= {
            "improved",
            "regressed",
            "persistent_fail",
            "stable_success",
        }
        assert not (edir / "rollout_prev/topup_01").exists()
    else:
        # the epoch-1 and epoch-2 skills answer alike: no changed pair anywhere, so the
        # top-up walks the whole train split (60 items in chunks of 10) and finds none
        assert pairs == []
        assert (edir / "rollout_prev/topup_05/results.json").exists()
        assert not (edir / "rollout_prev/topup_06").exists()


async def test_full_rewrite_mode_uses_the_merged_whole_skill(tmp_path: Path) -> None:
    out = tmp_path / "run"
    recorder = FailingWrapper(inner=DemoWorld(), fail=lambda _r: False)
    await train(
        demo_cfg(
            out,
            "optimizer.update_mode=full_rewrite",
            "train.num_epochs=1",
            "evaluation.eval_test=false",
        ),
        recorder,
    )
    hist = history(out)
    assert [h["action"] for h in hist][:2] == ["reject", "accept_new_best"]
    assert all(h.get("edit_budget") is None and h["lr_control_mode"] == "none" for h in hist[:2])
    assert not any(r.stage == "rank" for r in recorder.calls)  # no ranking in this mode
    result = json.loads((out / "steps/step_0002/full_rewrite_result.json").read_text())
    assert result["op"] == "rewrite"
    assert (
        (out / "steps/step_0002/candidate_skill.md")
        .read_text()
        .startswith(result["content"].rstrip())
    )
    best = (out / "best_skill.md").read_text()
    assert HARMFUL_RULE not in best and RULES["count"].text in best


async def test_appendix_is_consolidated_past_the_threshold(tmp_path: Path) -> None:
    def reply(request: CompletionRequest) -> str:
        if request.stage == "analyst":
            first_id = request.prompt.split("(id=", 1)[1].split(")", 1)[0]
            note = f"Before answering item {first_id}, re-read the rules above carefully."
            return json.dumps({"batch_size": 4, "patch": {"edits": []}, "appendix_notes": [note]})
        if request.stage == "appendix_consolidate":
            assert "<reminders>" in request.prompt
            return json.dumps({"appendix_notes": ["Re-read the rules before answering."]})
        return lapse_world(request)

    out = tmp_path / "run"
    cfg = demo_cfg(
        out,
        "reflect.skill_aware=true",
        "reflect.consolidate_threshold=2",
        "train.num_epochs=1",
        "evaluation.eval_test=false",
        "optimizer.use_slow_update=false",
        "optimizer.use_meta_skill=false",
    )
    backend = ScriptedBackend(reply=reply)
    await train(cfg, backend)
    first = history(out)[0]
    assert first["appendix_consolidated"] is True
    candidate = (out / "steps/step_0001/candidate_skill.md").read_text()
    assert "Re-read the rules before answering." in candidate
    assert "Before answering item" not in candidate
    assert sum(1 for r in backend.requests if r.stage == "appendix_consolidate") >= 1


@pytest.mark.parametrize("gate", ["strict", "off"])
async def test_final_and_test_eval_dirs_are_written_when_the_docs_say(
    tmp_path: Path, gate: str
) -> None:
    """docs/trainer.md: final_selection_eval/ only for a final skill that differs from the
    best one and has no validation score yet (a current skill normally has one); test_eval*/
    one per distinct skill."""
    from skillopt.trainer.run_context import skill_hash

    out = tmp_path / "run"
    await train(demo_cfg(out, f"gate.mode={gate}"), DemoWorld())
    state = json.loads((out / "runtime_state.json").read_text())
    initial = (out / "skills" / "skill_v0000.md").read_text()
    best = (out / state["best_skill_path"]).read_text()
    final = (out / state["current_skill_path"]).read_text()
    assert skill_hash(final) in state["selection_cache"]  # scored when it became current
    assert not (out / "final_selection_eval").exists()
    assert (out / "test_eval_baseline").is_dir()
    assert (out / "test_eval").is_dir() == (best != initial)
    assert (out / "test_eval_final").is_dir() == (final not in (initial, best))
    docs = " ".join((REPO / "docs" / "trainer.md").read_text().split())
    assert "final_selection_eval/ only when the final skill differs from the best one" in docs
    assert "one directory per distinct skill" in docs


async def test_a_gated_slow_update_takes_the_paired_decision(tmp_path: Path) -> None:
    """``slow_update_gated``: the guided skill faces the steps' paired gate (fresh samples
    numbered apart from every step's, the cache bypassed), not one single-score comparison."""
    out = tmp_path / "run"
    quick = ("optimizer.use_meta_skill=false", "evaluation.eval_test=false")
    cfg = demo_cfg(out, "optimizer.slow_update_gated=true", *quick)
    recorder = FailingWrapper(inner=DemoWorld(), fail=lambda _r: False)
    await train(cfg, recorder)
    result = json.loads((out / "slow_update/epoch_02/slow_result.json").read_text())
    assert result["gate"]["mode"] == "paired"
    assert result["action"] in ("accept_new_best", "reject")
    assert result["gate"]["n_pairs"] >= 30  # every val item, paired
    assert (out / "slow_update/epoch_02/gate").is_dir()
    assert not (out / "slow_update/epoch_02/selection_eval").exists()
    fresh = {r.sample_id for r in recorder.calls if r.stage == "rollout" and not r.use_cache}
    assert any(k >= 500_000_000 + 2 * 1000 for k in fresh)


async def test_an_unusable_analyst_reply_is_kept_where_its_diagnostic_points(
    tmp_path: Path,
) -> None:
    """Issue 31: the analyst's diagnostics named the patch file, which is never written
    when the reply is unusable, and the reply itself was kept nowhere."""
    demo = DemoWorld()

    class ProseAnalyst(ScriptedBackend):
        async def complete(self, request: CompletionRequest):  # type: ignore[no-untyped-def]
            if request.stage == "analyst":
                return await super().complete(request)
            return await demo.complete(request)

    out = tmp_path / "run"
    backend = ProseAnalyst(reply=lambda _r: "I looked at the failures; the skill is fine.")
    cfg = demo_cfg(out, "train.num_epochs=1", "evaluation.eval_test=false")
    with contextlib.suppress(RunFailedError):  # a run that learned nothing may end so
        await train(cfg, backend)
    notes = [d for h in history(out) for d in h.get("diagnostics", []) if d["stage"] == "analyst"]
    assert notes
    for note in notes:
        kept = out / note["file"]
        assert kept.is_file(), note
        assert "the skill is fine" in json.loads(kept.read_text())["reply"]
