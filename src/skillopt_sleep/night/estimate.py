"""The night's spend, before and after: the up-front estimate and the per-call token model.

Before the learning stages spend anything, :func:`announce_estimate` says how many calls
each stage will make and what they will cost (priced per member from what earlier calls
and nights measured), and warns when the budget will cut the night short. After the
night, :func:`learn_tokens` folds tonight's measured tokens per call into the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from skillopt.logging import get_logger
from skillopt.types import ReferenceKind, TaskRecord
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.night.course import Estimate
from skillopt_sleep.night.running import Night
from skillopt_sleep.spend import SpendEstimate
from skillopt_sleep.state import project_dir
from skillopt_sleep.token_model import TokenModel, budget_warning, estimate_tokens

__all__ = ["announce_estimate", "estimate_spend", "learn_tokens"]

_log = get_logger(__name__)


def estimate_spend(
    *,
    n_learn: int,
    n_test: int,
    cfg: SleepConfig,
    rubric_share: float,
    n_carried: int = 0,
    skills: Mapping[str, int] | None = None,
) -> SpendEstimate:
    """A rough upper estimate of the night's calls, printed before any spend.

    Rollouts cover every learnable task; each proposed edit is tried alone on its fold
    (so a round's singles cost about ``edit_budget`` passes over the tasks), then the
    union once over every task. Adaptive extra samples are not counted. ``n_learn`` is the
    managed night's share of the tasks; ``skills`` maps each project skill that learns
    tonight (the fan-out) to its task count: each runs the same learning on its own tasks,
    its skill document only (memory is read-only there).
    """
    night = cfg.night
    judge = 1.0 + rubric_share
    targets = int(night.evolve_skill) + int(night.evolve_memory)
    by_stage = _learning(n_learn, targets, cfg, judge, n_carried)
    by_skill: dict[str, int] = {}
    for name, n in (skills or {}).items():
        own = _learning(n, 1, cfg, judge, 0)
        by_skill[name] = sum(own.values())
        for stage, calls in own.items():
            by_stage[stage] += calls
    by_stage["test"] = int(2 * n_test * judge)
    calls = sum(by_stage.values())
    return SpendEstimate(calls=calls, tokens=calls * 900, by_stage=by_stage, by_skill=by_skill)


def _learning(
    n_learn: int, targets: int, cfg: SleepConfig, judge: float, n_carried: int
) -> dict[str, int]:
    """One learner's calls (the managed night's or one skill's) over ``n_learn`` tasks."""
    night, gate = cfg.night, cfg.gate
    if n_learn == 0:
        return dict.fromkeys(("rollouts", "reflect", "trials", "union"), 0)
    folds = min(night.folds, n_learn)
    rollouts = max(night.dream_rollouts, gate.samples_per_task)
    per_pass = n_learn * gate.samples_per_task * judge
    return {
        "rollouts": int(n_learn * rollouts * judge * night.rounds),
        "reflect": 2 * folds * targets * night.rounds,
        "trials": int(
            (night.edit_budget * per_pass + n_carried * per_pass) * targets * night.rounds
        ),
        "union": int(per_pass * targets * night.rounds),
    }


def announce_estimate(
    night: Night,
    tasks: list[TaskRecord],
    learn: list[TaskRecord],
    test: list[TaskRecord],
    *,
    skills: Mapping[str, int] | None = None,
) -> Estimate:
    """The up-front spend estimate, said before any model call of the learning stages: calls
    per stage (``learn``: the managed night's tasks; ``skills``: each fanned-out skill's task
    count), priced per member from what earlier calls and nights measured, and whether the
    budget will cut the night short."""
    cfg = night.cfg
    rubric = sum(t.reference_kind is ReferenceKind.RUBRIC for t in tasks) / len(tasks)
    estimate = estimate_spend(
        n_learn=len(learn), n_test=len(test), cfg=cfg, rubric_share=rubric, skills=skills
    )
    model = TokenModel.load(project_dir(cfg.state_path(), night.project))
    model.observe(night.spend.usage_by_member)  # tonight's calls so far (mining) count too
    priced = estimate_tokens(model, cfg.pool, estimate.by_stage, rubric_share=rubric)
    estimate = replace(estimate, tokens=priced.tokens)
    said = estimate.describe() + (f"; per call: {priced.describe()}" if priced.sources else "")
    night.progress.note(f"estimated spend: {said}")
    warning = budget_warning(
        calls=estimate.calls,
        tokens=estimate.tokens,
        max_calls=cfg.budget.max_calls,
        max_tokens=cfg.budget.max_tokens,
    )
    if warning:
        night.notes.append(warning)
        night.progress.note(warning)
    _log.info("night.estimate", calls=estimate.calls, tokens=estimate.tokens,
                per_call=priced.per_call, sources=priced.sources)  # fmt: skip
    detail = {
        "calls": estimate.calls,
        "by_stage": estimate.by_stage,
        "by_skill": estimate.by_skill,
        **priced.to_dict(),
        "budget_warning": warning,
    }
    return Estimate(said=said, detail=detail)


def learn_tokens(night: Night) -> None:
    """Fold tonight's measured tokens per call into the project's token model."""
    where = project_dir(night.cfg.state_path(), night.project)
    model = TokenModel.load(where)
    model.observe(night.spend.usage_by_member)
    try:
        model.save(where)
    except OSError as exc:  # a cache of averages: never sinks the night
        _log.warning("token_model.save_failed", error=str(exc))
