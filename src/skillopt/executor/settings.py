"""The ``[executor]`` settings a trainer config (and the night's replay, on opt-in) share."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ExecutorKind", "ExecutorSettings"]


class ExecutorKind(StrEnum):
    LOCAL = "local"  # every rollout in this process (the default)
    RAY = "ray"  # every rollout as a Ray task; model calls still go through this process's pool


class ExecutorSettings(BaseModel):
    """Where rollouts run. Ray is imported only when ``kind = "ray"``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ExecutorKind = ExecutorKind.LOCAL
    # "" = start a private Ray instance on this machine (loopback only) for the run;
    # "auto" = the cluster this machine already belongs to; or "ray://head:10001" / "head:6379"
    address: str = ""
    num_cpus: int = Field(default=0, ge=0)  # the private instance's CPUs (0 = every core)
    cpus_per_task: float = Field(default=1.0, gt=0)  # Ray CPUs one rollout reserves
