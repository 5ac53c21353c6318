"""Which sample each of the trainer's rollouts draws, in one place.

A sample id is part of a call's cache key and, for environments that randomise what they
show (``mcq`` shuffles the options with a permutation seeded by the item and the sample
id), of what the target sees. Ids depend only on the step and the epoch, so a rerun with the
same seed draws the same samples and writes the same bytes:

- validation, test and ``skillopt eval``: sample 0, the same for every skill, so their
  single scores compare like with like (and a re-scored skill is read back from the cache);
- step ``n``'s training rollouts: sample ``n``, so an item met again in a later epoch is
  attempted afresh (an mcq item in another option order);
- epoch ``e``'s comparison of the previous and the current skill: one sample id for both
  (paired), ``EPOCH_SAMPLES + e * STEP_SAMPLES + COMPARISON``;
- the paired gate: fresh numbered samples from step ``n``'s ``n * STEP_SAMPLES``, the gated
  slow update's ``EPOCH_SAMPLES + e * STEP_SAMPLES`` and the final promotion's
  ``FINAL_SAMPLES`` (:mod:`skillopt.trainer.paired_gate`).
"""

from __future__ import annotations

from skillopt.trainer.run_context import Sample

__all__ = [
    "COMPARISON",
    "EPOCH_SAMPLES",
    "FINAL_SAMPLES",
    "STEP_SAMPLES",
    "comparison_sample",
    "slow_update_offset",
    "train_sample",
]

STEP_SAMPLES = 1000
"""Sample ids of step ``n``'s gate start at ``n * STEP_SAMPLES``: every step draws samples no
earlier decision saw."""
EPOCH_SAMPLES = 500_000_000
"""Sample ids of epoch ``n``'s end start at ``EPOCH_SAMPLES + n * STEP_SAMPLES``, apart from
every step's."""
FINAL_SAMPLES = 1_000_000_000
"""First sample id of the final promotion's comparison."""
COMPARISON = STEP_SAMPLES - 1
"""Within an epoch's block, the id of the longitudinal comparison's sample (the gated slow
update's samples count up from the block's start)."""


def train_sample(step: int) -> Sample:
    """Step ``step``'s training rollouts (cacheable: a resumed step reads them back)."""
    return Sample(sample_id=step)


def comparison_sample(epoch: int) -> Sample:
    """Both skills of epoch ``epoch``'s longitudinal comparison, on the same sample."""
    return Sample(sample_id=EPOCH_SAMPLES + epoch * STEP_SAMPLES + COMPARISON)


def slow_update_offset(epoch: int) -> int:
    """First sample id of epoch ``epoch``'s gated slow update."""
    return EPOCH_SAMPLES + epoch * STEP_SAMPLES
