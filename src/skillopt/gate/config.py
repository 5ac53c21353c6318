"""The gate's settings: one :class:`GateConfig`, the ``[gate]`` table of the night's config
(``sleep.toml``) and of the trainer's, passed through to every decision unchanged."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from skillopt.config import StrictModel
from skillopt.errors import ConfigError

__all__ = ["GateConfig", "GateMetric", "GateMode", "gate_score"]


class GateMetric(StrEnum):
    HARD = "hard"
    SOFT = "soft"
    MIXED = "mixed"


GateMode = Literal["strict", "greedy", "off"]
"""strict: the full gate; greedy: the night keeps its hill-climbed documents without the
final check (:mod:`skillopt_sleep.night.learn.gate_modes`); off: no validation, every edit that
applies is kept (the trainer: the candidate is forced in)."""


def gate_score(
    hard: float, soft: float, *, metric: GateMetric | str, mixed_weight: float = 0.5
) -> float:
    """hard | soft | ``(1-w)*hard + w*soft`` with ``w`` clamped to [0, 1]."""
    try:
        which = GateMetric(metric)
    except ValueError as exc:
        raise ConfigError(f"unknown gate metric {metric!r}", key="gate.metric") from exc
    if which is GateMetric.HARD:
        return hard
    if which is GateMetric.SOFT:
        return soft
    if not math.isfinite(mixed_weight):
        raise ConfigError(
            f"mixed weight must be finite, got {mixed_weight!r}", key="gate.mixed_weight"
        )
    w = min(1.0, max(0.0, mixed_weight))
    return (1.0 - w) * hard + w * soft


class GateConfig(StrictModel):
    """How the gate scores and decides (one set of defaults for the night and the trainer).

    A task's score is the gate metric of a rollout; two documents are compared on paired
    samples, ``samples_per_task`` first and more where they disagree, up to
    ``max_samples_per_task``; a candidate must beat the baseline by more than ``min_delta``
    at one-sided ``confidence``; a lone regression that would veto it is confirmed on
    ``confirm_samples`` fresh pairs (0: off)."""

    mode: GateMode = "strict"
    metric: GateMetric = GateMetric.MIXED
    mixed_weight: float = Field(default=0.5, ge=0, le=1)
    no_regression: bool = False  # any held-out task scoring lower blocks the edit
    min_delta: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    samples_per_task: int = Field(default=1, ge=1, le=16)
    max_samples_per_task: int = Field(default=8, ge=1, le=32)
    confirm_samples: int = Field(default=16, ge=0, le=64)
    confidence: float = Field(default=0.9, ge=0.5, lt=1)

    @model_validator(mode="after")
    def _samples_in_order(self) -> GateConfig:
        if self.max_samples_per_task < self.samples_per_task:
            raise ValueError("max_samples_per_task must be >= samples_per_task")
        return self

    @property
    def gated(self) -> bool:
        """False for ``mode = "off"``: no validation at all."""
        return self.mode != "off"

    def score(self, hard: float, soft: float) -> float:
        return gate_score(hard, soft, metric=self.metric, mixed_weight=self.mixed_weight)
