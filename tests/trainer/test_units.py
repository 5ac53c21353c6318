"""Trainer pure pieces: config, step arithmetic, batch plans, budgets, gate, scoring."""

from __future__ import annotations

from pathlib import Path

import pytest

from skillopt.errors import ConfigError, DataError
from skillopt.gate import GateConfig, gate_score, trainer_outcome
from skillopt.optimizer.budget import scheduled_budget
from skillopt.trainer.config import (
    GateMetric,
    LrScheduler,
    load_trainer_config,
    parse_override,
)
from skillopt.trainer.data import eval_batch, plan_steps, plan_train_epoch, sample_train
from skillopt.trainer.envs.base import RolloutResult, parse_split
from skillopt.trainer.envs.qa import QAEnvironment, exact_match, extract_answer, token_f1
from skillopt.trainer.step.reflect import partition
from skillopt.types import GateAction, Split
from skillopt_sleep.config import SleepConfig

REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- config


def test_demo_config_inherits_base_and_applies_overrides() -> None:
    cfg = load_trainer_config(
        REPO / "configs/trainer/qa_demo.toml",
        overrides=["train.num_epochs=3", "optimizer.lr_scheduler=linear", "out_root=/tmp/x"],
    )
    assert cfg.train.num_epochs == 3
    assert cfg.optimizer.lr_scheduler is LrScheduler.LINEAR
    assert cfg.reflect.minibatch_size == 4  # from base.toml
    assert cfg.backend.demo_latency_s == 0.02  # from the leaf
    assert cfg.out_root == "/tmp/x"


def test_unknown_key_is_an_error_naming_its_path(tmp_path: Path) -> None:
    (tmp_path / "base.toml").write_text("[train]\nbatch_size = 4\n")
    (tmp_path / "leaf.toml").write_text('base = "base.toml"\n[train]\nbatchsize = 5\n')
    with pytest.raises(ConfigError, match=r"train\.batchsize"):
        load_trainer_config(tmp_path / "leaf.toml")
    with pytest.raises(ConfigError, match=r"optimizer\.nope"):
        load_trainer_config(tmp_path / "base.toml", overrides=["optimizer.nope=1"])


def test_inheritance_cycle_and_bad_values(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('base = "b.toml"\n')
    (tmp_path / "b.toml").write_text('base = "a.toml"\n')
    with pytest.raises(ConfigError, match="cycle"):
        load_trainer_config(tmp_path / "a.toml")
    (tmp_path / "c.toml").write_text("[reflect]\nmerge_batch_size = 1\n")
    with pytest.raises(ConfigError, match=r"reflect\.merge_batch_size"):
        load_trainer_config(tmp_path / "c.toml")
    with pytest.raises(ConfigError):
        parse_override("novalue")


def test_old_gate_keys_load_into_the_gate_table_with_a_deprecation_warning(
    tmp_path: Path,
) -> None:
    """``evaluation.gate_*`` and ``evaluation.use_gate`` (before the one ``[gate]`` table)
    still load, into ``[gate]``, each with a warning naming its new key; in a file, in a
    ``--set`` override, and over a base that already uses ``[gate]``."""
    (tmp_path / "old.toml").write_text(
        'base = "%s"\n[evaluation]\nuse_gate = false\ngate_confidence = 0.8\n'
        "gate_confirm_samples = 4\nmixed_weight = 0.25\n" % (REPO / "configs/trainer/base.toml")
    )
    with pytest.warns(FutureWarning) as caught:
        cfg = load_trainer_config(tmp_path / "old.toml", overrides=["evaluation.gate_samples=2"])
    assert sorted(str(w.message) for w in caught) == [
        f"evaluation.{old} is deprecated: use gate.{new} (the [gate] table)"
        for old, new in sorted(
            [("gate_confidence", "confidence"), ("gate_confirm_samples", "confirm_samples"),
             ("gate_samples", "samples_per_task"), ("mixed_weight", "mixed_weight"),
             ("use_gate", "mode")]
        )
    ]  # fmt: skip
    assert (cfg.gate.mode, cfg.gate.confidence, cfg.gate.confirm_samples) == ("off", 0.8, 4)
    assert (cfg.gate.mixed_weight, cfg.gate.samples_per_task) == (0.25, 2)
    assert cfg.gate.metric is GateMetric.HARD  # from base.toml's [gate]
    (tmp_path / "both.toml").write_text(
        "[evaluation]\ngate_min_delta = 0.1\n[gate]\nmin_delta = 0.2\n"
    )
    with pytest.warns(FutureWarning), pytest.raises(ConfigError, match=r"gate\.min_delta"):
        load_trainer_config(tmp_path / "both.toml")


def test_a_partial_gate_table_completes_from_the_one_set_of_defaults(tmp_path: Path) -> None:
    """The trainer has no gate preset of its own: what a config leaves out is the shared
    GateConfig default (the night's too); base.toml states the trainer's choices."""
    (tmp_path / "g.toml").write_text("[gate]\nmin_delta = 0.1\n")
    cfg = load_trainer_config(tmp_path / "g.toml")
    assert cfg.gate == GateConfig(min_delta=0.1)
    assert cfg.gate == SleepConfig().gate.model_copy(update={"min_delta": 0.1})
    (tmp_path / "b.toml").write_text(
        f'base = "{REPO}/configs/trainer/base.toml"\n[gate]\nmin_delta = 0.1\n'
    )
    based = load_trainer_config(tmp_path / "b.toml").gate
    assert (based.metric, based.confidence, based.min_delta) == (GateMetric.HARD, 0.95, 0.1)
    (tmp_path / "greedy.toml").write_text('[gate]\nmode = "greedy"\n')
    with pytest.raises(ConfigError, match=r"strict.*off"):
        load_trainer_config(tmp_path / "greedy.toml")


def test_override_values_parse_as_toml_literals() -> None:
    assert parse_override("a.b=3") == (["a", "b"], 3)
    assert parse_override("a=true") == (["a"], True)
    assert parse_override("a=hello world") == (["a"], "hello world")


# ----------------------------------------------------------------------------- plans


def test_step_arithmetic_and_train_size_mismatch() -> None:
    plan = plan_steps(
        loaded_train_size=6, configured_train_size=0, batch_size=3, accumulation=1, num_epochs=2
    )
    assert (plan.steps_per_epoch, plan.batches_per_epoch, plan.total_steps) == (2, 2, 4)
    plan = plan_steps(
        loaded_train_size=10, configured_train_size=10, batch_size=3, accumulation=2, num_epochs=1
    )
    assert (plan.steps_per_epoch, plan.batches_per_epoch) == (2, 4)
    with pytest.raises(ConfigError, match="train_size"):
        plan_steps(
            loaded_train_size=6,
            configured_train_size=5,
            batch_size=3,
            accumulation=1,
            num_epochs=1,
        )


def test_epoch_plan_seeds_slices_and_refill() -> None:
    ids = [f"i{n}" for n in range(6)]
    plan = plan_train_epoch(ids, epoch=1, batch_size=3, batches=2, seed=42)
    assert [b.seed for b in plan] == [1043, 1044]
    assert sorted(plan[0].item_ids + plan[1].item_ids) == sorted(ids)  # one pass, no repeats
    again = plan_train_epoch(ids, epoch=1, batch_size=3, batches=2, seed=42)
    assert again == plan
    other_epoch = plan_train_epoch(ids, epoch=2, batch_size=3, batches=2, seed=42)
    assert other_epoch[0].seed == 2043
    # more batches than the pass fills: the empty slice is refilled from a reshuffle
    padded = plan_train_epoch(ids, epoch=1, batch_size=3, batches=3, seed=42)
    assert len(padded[2].item_ids) == 3 and padded[2].seed == 1045


def test_eval_batch_and_sample() -> None:
    ids = ["a", "b", "c", "d"]
    assert eval_batch(ids, 2) == ["a", "b"]
    assert eval_batch(ids, 0) == ids
    assert sample_train(ids, 2, 7) == sample_train(ids, 2, 7)
    assert parse_split("valid_seen") is Split.VAL and parse_split("valid_unseen") is Split.TEST
    with pytest.raises(ConfigError):
        parse_split("dev")


@pytest.mark.parametrize(
    ("mode", "hi", "lo", "total", "expected"),
    [
        (LrScheduler.COSINE, 10, 2, 4, [9, 6, 3, 2]),
        (LrScheduler.LINEAR, 4, 2, 4, [4, 3, 2, 2]),
        (LrScheduler.CONSTANT, 4, 2, 4, [4, 4, 4, 4]),
        (LrScheduler.COSINE, 4, 2, 1, [4]),
    ],
)
def test_budget_schedule(
    mode: LrScheduler, hi: int, lo: int, total: int, expected: list[int]
) -> None:
    got = [
        scheduled_budget(mode, max_edits=hi, min_edits=lo, step=s, total_steps=total)
        for s in range(1, total + 1)
    ]
    assert got == expected


# ----------------------------------------------------------------------------- gate


def test_gate_strict_improvement_and_gate_off() -> None:
    assert (
        trainer_outcome(candidate=0.5, current=0.5, best=0.5, use_gate=True).action
        is GateAction.REJECT
    )
    assert (
        trainer_outcome(candidate=0.6, current=0.5, best=0.5, use_gate=True).action
        is GateAction.ACCEPT_NEW_BEST
    )
    plain = trainer_outcome(candidate=0.6, current=0.4, best=0.7, use_gate=True)
    assert plain.action is GateAction.ACCEPT and not plain.becomes_best
    forced = trainer_outcome(candidate=0.1, current=0.5, best=0.5, use_gate=False)
    assert forced.action is GateAction.FORCE_ACCEPT
    assert forced.becomes_current and not forced.becomes_best
    assert gate_score(1.0, 0.0, metric=GateMetric.MIXED, mixed_weight=0.25) == 0.75
    assert gate_score(1.0, 0.5, metric=GateMetric.SOFT, mixed_weight=0.25) == 0.5


# ----------------------------------------------------------------------------- reflect split


def _result(i: int, passed: bool) -> RolloutResult:
    return RolloutResult(task_id=f"r{i}", hard=1.0 if passed else 0.0, soft=0.0, task_type="qa")


def test_partition_seeded_minibatches() -> None:
    results = [_result(i, passed=i >= 5) for i in range(8)]  # 5 failures, 3 successes
    batches = partition(results, seed=11, minibatch=2, failure_only=False)
    sides = [(side.value, idx, len(b)) for side, idx, b in batches]
    assert sides == [
        ("failure", 0, 2),
        ("failure", 1, 2),
        ("failure", 2, 1),
        ("success", 0, 2),
        ("success", 1, 1),
    ]
    assert batches == partition(results, seed=11, minibatch=2, failure_only=False)
    only = partition(results, seed=11, minibatch=2, failure_only=True)
    assert all(side.value == "failure" for side, _, _ in only)
    partial = RolloutResult(task_id="p", hard=0.5, soft=0.5, task_type="qa")
    assert partial.passed  # a partial hard score counts as a success


# ----------------------------------------------------------------------------- QA env


def test_qa_scoring() -> None:
    assert (
        extract_answer("think\n<answer>A</answer>\n<answer> The Paris. </answer>") == "The Paris."
    )
    assert extract_answer("no tags\nlast line\n") == "last line"
    assert exact_match("the Paris.", ["paris"]) == 1.0
    assert exact_match("Paris, France", ["Paris"]) == 0.0
    assert token_f1("Paris France", ["Paris"]) == pytest.approx(2 / 3)
    assert token_f1("", ["x"]) == 0.0


def test_qa_bundled_set_and_bad_files(tmp_path: Path) -> None:
    env = QAEnvironment()
    assert len(env.items(Split.TRAIN)) == 60
    assert {len(env.items(Split.VAL)), len(env.items(Split.TEST))} == {30}
    assert "plain" in env.task_types()
    for name in ("train", "val", "test"):
        row = f'{{"id": "{name}-a", "question": "q", "answers": ["x"]}}\n'
        (tmp_path / f"{name}.jsonl").write_text(row)
    assert len(QAEnvironment(tmp_path).items(Split.TEST)) == 1
    (tmp_path / "val.jsonl").write_text('{"id": "a", "question": "q", "answers": []}\n')
    with pytest.raises(DataError, match=r"val\.jsonl:1"):
        QAEnvironment(tmp_path)
    (tmp_path / "val.jsonl").write_text("{oops\n")
    with pytest.raises(DataError, match="invalid JSON"):
        QAEnvironment(tmp_path)


def test_bundled_set_is_the_seeded_generator_output(tmp_path: Path) -> None:
    from skillopt.trainer.envs.qa import bundled_data_dir
    from skillopt.trainer.envs.qa_synth import write_synthetic_qa

    write_synthetic_qa(tmp_path, 60, 30, 30, seed=7)
    for name in ("train", "val", "test"):
        assert (tmp_path / f"{name}.jsonl").read_bytes() == (
            bundled_data_dir() / f"{name}.jsonl"
        ).read_bytes()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(3, 3), (-2, 0), (4.0, 4), ("7 edits", 7), ("apply -1", 0), ("about 2 or 3", 2)],
)
def test_edit_count_coercion(raw: object, expected: int) -> None:
    from skillopt.trainer.replies import coerce_edit_count

    assert coerce_edit_count(raw) == expected


@pytest.mark.parametrize("raw", [True, 2.5, "none", None, [3]])
def test_edit_count_coercion_rejects(raw: object) -> None:
    from skillopt.trainer.replies import coerce_edit_count

    with pytest.raises(ValueError):
        coerce_edit_count(raw)


def test_base_toml_lists_every_key_at_its_default() -> None:
    import tomllib

    from skillopt.trainer.config import TrainerConfig

    path = REPO / "configs/trainer/base.toml"
    data = tomllib.loads(path.read_text())
    for name, field in TrainerConfig.model_fields.items():
        if name == "out_root":
            assert name in data
            continue
        assert field.annotation is not None
        assert set(data[name]) == set(field.annotation.model_fields), name
    # every key at its default but the gate's: base.toml states the trainer's own choices
    # (hard metric, 0.95) over the one set of gate defaults the night shares
    loaded = load_trainer_config(path)
    assert loaded.model_copy(update={"gate": TrainerConfig().gate}) == TrainerConfig()
    assert loaded.gate == GateConfig(metric=GateMetric.HARD, confidence=0.95)


def test_mean_scores_tie_whatever_the_order() -> None:
    import random

    from skillopt.trainer.envs.base import RolloutResult as EnvResult
    from skillopt.trainer.rollouts import mean_scores

    rng = random.Random(7)
    values = [rng.random() * 10 ** rng.randint(-8, 3) for _ in range(50)]
    base = [EnvResult(task_id=str(i), hard=v, soft=v, task_type="qa") for i, v in enumerate(values)]
    for _ in range(200):
        shuffled = base[:]
        rng.shuffle(shuffled)
        assert mean_scores(shuffled) == mean_scores(base)
