"""Glue between judged rollouts and the core gate (:mod:`skillopt.gate`).

A val task's score is the mean, over its samples, of the gate score (hard, soft or mixed);
the decision (strict improvement plus ``min_delta``, no-regression, leak ->
``reject_unverified``) is the core gate's. Intermediate trials are judged without the leak
check (hill-climbing needs a yes/no); the final decision applies it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from skillopt.gate import GateConfig, GateMetric, decide, task_scores
from skillopt.types import GateDecision, RolloutResult
from skillopt_sleep.config import GateSettings

__all__ = ["Gate"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Gate:
    settings: GateSettings
    train_ids: frozenset[str] = field(default_factory=frozenset)
    val_ids: frozenset[str] = field(default_factory=frozenset)

    @property
    def config(self) -> GateConfig:
        s = self.settings
        return GateConfig(
            metric=GateMetric(s.metric),
            mixed_weight=s.mixed_weight,
            no_regression=s.no_regression,
            min_delta=s.min_delta,
            samples_per_task=s.samples_per_task,
            max_samples_per_task=s.max_samples_per_task,
            confirm_samples=s.confirm_samples,
            confidence=s.confidence,
        )

    def with_ids(self, train_ids: Collection[str], val_ids: Collection[str]) -> Gate:
        return Gate(
            settings=self.settings, train_ids=frozenset(train_ids), val_ids=frozenset(val_ids)
        )

    def score(self, result: RolloutResult) -> float:
        return 0.0 if result.error else self.config.score(result.hard, result.soft)

    def per_task(self, results: Sequence[RolloutResult]) -> dict[str, float]:
        return task_scores(results, config=self.config)

    def mean(self, results: Sequence[RolloutResult]) -> float:
        per = [v for v in self.per_task(results).values() if v == v]
        return sum(per) / len(per) if per else 0.0

    def decide(
        self,
        baseline: Sequence[RolloutResult],
        candidate: Sequence[RolloutResult],
        *,
        final: bool = False,
        edits_applied: bool = True,
    ) -> GateDecision:
        val_ids = self.val_ids or frozenset(r.task_id for r in baseline)
        # Leaks are judged once, on the final decision; intermediate trials only compare.
        return decide(
            self.per_task(baseline),
            self.per_task(candidate),
            config=self.config,
            train_ids=self.train_ids,
            val_ids=val_ids,
            edits_applied=edits_applied,
            check_leaks=final,
        )
