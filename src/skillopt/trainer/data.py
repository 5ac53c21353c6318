"""Batch planning: seeded epoch shuffles, step arithmetic, eval batches of the first N items.

Pure functions over item-id lists, so the arithmetic and the seeds are pinned by table tests.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from skillopt.errors import ConfigError

__all__ = ["BatchSpec", "StepPlan", "eval_batch", "plan_steps", "plan_train_epoch", "sample_train"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchSpec:
    """One micro-batch of a training epoch."""

    index: int  # batch index within the epoch
    seed: int  # analyst shuffle seed for this batch
    item_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepPlan:
    train_size: int
    steps_per_epoch: int
    batches_per_epoch: int
    total_steps: int


def plan_steps(
    *,
    loaded_train_size: int,
    configured_train_size: int,
    batch_size: int,
    accumulation: int,
    num_epochs: int,
) -> StepPlan:
    """``steps_per_epoch = ceil(train / (batch * accumulation))``; a configured non-zero train
    size must agree with the loaded split."""
    if configured_train_size and configured_train_size != loaded_train_size:
        raise ConfigError(
            f"configured {configured_train_size} but the train split has {loaded_train_size}",
            key="train.train_size",
        )
    if loaded_train_size == 0:
        raise ConfigError("the train split is empty", key="env.data_dir")
    steps = math.ceil(loaded_train_size / (batch_size * accumulation))
    return StepPlan(
        train_size=loaded_train_size,
        steps_per_epoch=steps,
        batches_per_epoch=steps * accumulation,
        total_steps=steps * num_epochs,
    )


def plan_train_epoch(
    item_ids: Sequence[str], *, epoch: int, batch_size: int, batches: int, seed: int
) -> list[BatchSpec]:
    """One pass over the train ids shuffled with ``Random(seed + 1000*epoch)``, cut into
    consecutive slices; a slice that comes out empty (more batches than items) is refilled
    from a reshuffle seeded with the batch seed. Batch seed = ``seed + 1000*epoch + idx + 1``."""
    base = seed + epoch * 1000
    order = list(item_ids)
    random.Random(base).shuffle(order)
    plan: list[BatchSpec] = []
    for idx in range(batches):
        batch_seed = base + idx + 1
        chunk = order[idx * batch_size : (idx + 1) * batch_size]
        if not chunk:
            refill = list(item_ids)
            random.Random(batch_seed).shuffle(refill)
            chunk = refill[:batch_size]
        plan.append(BatchSpec(index=idx, seed=batch_seed, item_ids=tuple(chunk)))
    return plan


def eval_batch(item_ids: Sequence[str], env_num: int) -> list[str]:
    """The first ``env_num`` ids in file order; 0 means all."""
    return list(item_ids) if env_num <= 0 else list(item_ids[:env_num])


def sample_train(item_ids: Sequence[str], n: int, seed: int) -> list[str]:
    """``n`` train ids drawn by a seeded shuffle (slow update and meta-skill comparisons)."""
    order = list(item_ids)
    random.Random(seed).shuffle(order)
    return order[:n]
