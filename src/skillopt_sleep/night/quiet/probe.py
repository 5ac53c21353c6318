"""The noise probe: how many samples of each task a rollouts wave draws.

A wave's second and later samples of a task only tell something when the model's answers
vary (the contrastive reflection's spreads, tonight's noise, which tasks are quiet). Under
a model that answers consistently they repeat the first and change no decision; the gate
never reads them (its paired tests draw their own samples, adaptively).

One wave (:func:`draw_rollouts`), K = ``max(night.dream_rollouts, gate.samples_per_task)``:

1. **On record.** A task the archive has seen answer the same every time under these
   documents and models, on at least K samples (:func:`.recorded.noise_estimates`), draws one
   sample. A task recorded disagreeing makes tonight noisy: every other task draws K.
2. **Probe** (the night's first wave of tasks with no such record, when nothing says
   tonight is noisy): one sample of every task and a second of :func:`probe_size` of the
   unknown tasks, a seeded random subset (:func:`probe_subset`), in one wave.
3. **Verdict.** No probed task disagreed (its answers and their scores differ; one answer
   scored two ways is the judge's noise): the model answers consistently tonight, and this
   wave and every later one are one sample per task (the probe's second samples, equal to
   the first, are left out of the wave, so the reflection reads every task alike; they
   are recorded for the archive). Any disagreement: the remaining K-1 samples of every
   task, as without the probe (the probe's samples are read back, not paid twice); later
   waves draw K.

A handoff night (``[pool] kind = "handoff"``) probes like any other: its answers are the
model's, and a night that skipped the probe would draw other samples and so take other
decisions than the model's night given the same answers (issue 32). The verdict waits for
the probe's answers (a sitting of its own, step by step), and a resumed sitting reaches it
again from the answers read back.

The probe's size, and why a miss cannot weaken a decision, are in ``docs/night.md``
("The noise probe"). The verdict is kept on the night (``Night.consistent_tonight``); a
resumed night reaches the same one, since the subset is seeded by the documents and
sample ids and the samples are read back.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from skillopt.types import TaskRecord
from skillopt_sleep.night.learn.samples import Measured, sample_all
from skillopt_sleep.night.quiet.recorded import noise_estimates, steady_samples
from skillopt_sleep.replay import Docs

if TYPE_CHECKING:
    from skillopt_sleep.night.night_state import Night

__all__ = ["PROBE_FLIP", "PROBE_POWER", "draw_rollouts", "probe_size", "probe_subset"]

PROBE_FLIP = 0.10
"""The smallest share of flipped answers the probe must catch..."""
PROBE_POWER = 0.95
"""...with at least this probability."""


def probe_size(flip: float = PROBE_FLIP, power: float = PROBE_POWER) -> int:
    """Tasks to sample twice so that a model flipping each answer with probability
    ``flip`` shows a disagreement with probability ``power``: two samples of a task differ
    with probability 2f(1-f), so n tasks all agree with probability (1 - 2f(1-f))^n."""
    differ = 2 * flip * (1 - flip)
    return math.ceil(math.log(1 - power) / math.log(1 - differ))


def probe_subset(task_ids: Sequence[str], *, seed: int, salt: str) -> list[str]:
    """:func:`probe_size` of ``task_ids`` (all of them when there are no more), a seeded
    random choice: the same documents and sample ids pick the same tasks."""
    ids = sorted(task_ids)
    rng = random.Random(f"{seed}:{salt}")
    return sorted(rng.sample(ids, min(probe_size(), len(ids))))


def _disagree(values: Sequence[float]) -> bool:
    finite = [v for v in values if math.isfinite(v)]
    return len(finite) >= 2 and max(finite) - min(finite) > 1e-9


def _model_disagreed(wave: Measured, task_id: str) -> bool:
    """Whether the model's answers to ``task_id`` disagreed: their scores differ, and so do
    the answers. The same answer scored twice differently is the judge's noise, not the
    model's: it says nothing of whether another sample of the task would repeat the first
    (a faulted judge call asked again may come back with another verdict), and a night
    that took it for the model's noise would draw, and decide, unlike the night that did
    not see it."""
    if not _disagree(wave.scores.get(task_id, ())):
        return False
    answers = {r.response for r in wave.results if r.task_id == task_id and not r.error}
    return len(answers) > 1


async def _draw(
    night: Night, tasks: Sequence[TaskRecord], docs: Docs, counts: Mapping[str, int], first: int
) -> Measured:
    """``counts[task]`` samples of each task (samples drawn earlier tonight are read back;
    once the probe found the model consistent, so is a task's known answer under ``docs``:
    a later wave repeats it, :mod:`skillopt_sleep.stand_in`)."""
    arm = night.learning.baseline_arm()
    return await sample_all(
        night.learning, tasks, docs, samples=counts, phase="rollout", first=first, arm=arm
    )


async def draw_rollouts(
    night: Night, tasks: Sequence[TaskRecord], docs: Docs, first: int = 0
) -> Measured:
    """One rollouts wave of ``tasks`` under ``docs``, sample ids from ``first``: K samples
    of each task, or one where they could only repeat it (the module's walk)."""
    full = steady_samples(night)
    if full <= 1 or not tasks:
        return await _draw(night, tasks, docs, {t.id: full for t in tasks}, first)
    known = noise_estimates(night, tasks, docs)
    steady = {tid for tid, e in known.items() if e.steady and e.samples >= full}
    if any(e.samples and not e.steady for e in known.values()):
        night.noise.probed(False)  # the archive saw the model disagree here
    counts = {t.id: 1 if t.id in steady else full for t in tasks}
    if night.consistent_tonight:
        return await _draw(night, tasks, docs, dict.fromkeys(counts, 1), first)
    unknown = [t.id for t in tasks if t.id not in steady]
    if night.consistent_tonight is False or not unknown:
        return await _draw(night, tasks, docs, counts, first)
    probed = set(probe_subset(unknown, seed=night.cfg.night.seed, salt=f"{docs.key}:{first}"))
    wave = await _draw(night, tasks, docs, {t.id: 1 + (t.id in probed) for t in tasks}, first)
    night.check_waiting(night.stage)  # handoff: no verdict before the probe's answers
    night.noise.probed(not any(_model_disagreed(wave, t) for t in probed))
    night.progress.note(
        f"noise probe: {len(probed)} task(s) sampled twice, "
        + (
            "every pair agreed: one sample per task tonight"
            if night.consistent_tonight
            else f"answers disagreed: {full} samples per task tonight"
        )
    )
    if night.consistent_tonight:  # the second samples repeat the first: the wave is one each
        return await _draw(night, tasks, docs, dict.fromkeys(counts, 1), first)
    return await _draw(night, tasks, docs, counts, first)
