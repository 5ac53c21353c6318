"""``gate.mode``: how much of the validation gate a night applies.

- ``strict`` (default): every edit is tried alone on tasks its reflection never saw, the
  union is checked, and the final paired check against the live documents decides.
- ``greedy``: the same hill-climbing (each edit still has to help on its held-out fold),
  but no final check against the live documents: the best documents are kept whenever an
  edit was kept (:func:`skillopt.gate.decide_greedy`).
- ``off``: no validation at all: one reflection per document over every task's rollouts,
  and every edit that applies is kept.

``greedy`` and ``off`` nights say so in the report (a banner from
:func:`skillopt_sleep.night.report_markdown.mode_banner`, ``gate_mode``, the gate action
``greedy_applied`` / ``greedy_noop``) and their scores are not a measured gain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from skillopt.gate import decide_greedy
from skillopt.types import EditRecord, EditTarget, TaskRecord
from skillopt_sleep.night.learn.pairs import apply_to
from skillopt_sleep.night.learn.samples import sample_all
from skillopt_sleep.replay import Docs

if TYPE_CHECKING:
    from skillopt_sleep.night.learn.decision import Decision
    from skillopt_sleep.night.learn.measure import Measure

__all__ = ["GREEDY", "OFF", "STRICT", "greedy_final", "ungated"]

STRICT, GREEDY, OFF = "strict", "greedy", "off"


def greedy_final(decision: Decision, best: Docs, applied: list[EditRecord]) -> Decision:
    """``greedy``: keep the hill-climbed documents without the final paired check."""
    final = decide_greedy(len(applied))
    decision.final, decision.action = final, final.action
    decision.candidate = math.nan
    if final.accepted:
        decision.accepted, decision.docs, decision.applied = True, best, applied
    return decision


async def ungated(measure: Measure, tasks: Sequence[TaskRecord], start: Docs) -> Decision:
    """``off``: reflect once per document over every task and keep what applies."""
    from skillopt_sleep.night.learn.decision import Decision

    measure.begin("rollouts")
    samples = max(measure.settings.dream_rollouts, measure.gate.samples_per_task)
    base = await sample_all(measure, tasks, start, samples=samples, phase="rollout")
    measure.check_degenerate("rollouts", base.results)
    measure.end("rollouts", rollouts=len(base.results))
    measure.check_budget("rollouts")
    docs, applied = start, []
    settings = measure.settings
    targets = [t for t, on in ((EditTarget.SKILL, settings.evolve_skill),
                               (EditTarget.MEMORY, settings.evolve_memory)) if on]  # fmt: skip
    for target in targets:
        stage = f"reflect_{target.value}"
        measure.begin(stage)
        outcome = await measure.reflect(
            f"off.{target.value}", target, docs, base.rollout_sets(tasks)
        )
        measure.end(stage, edits=len(outcome.edits))
        measure.check_reflections(stage, [outcome])
        docs, app = apply_to(docs, outcome.edits, target)
        applied.extend(app.applied)
    final = decide_greedy(len(applied))
    return Decision(
        accepted=final.accepted, action=final.action, baseline=base.mean(),
        candidate=math.nan, final=final, docs=docs if final.accepted else start,
        applied=applied, rejected=[], start_scores=base.task_means(),
    )  # fmt: skip
