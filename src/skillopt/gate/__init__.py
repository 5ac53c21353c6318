"""The validation gate: accept an edit only when paired, fresh evidence says it helps.

How one candidate edit is accepted or rejected (the night's step; the trainer's step takes
the same path from 3 on, its candidate being the step's edits against the skill in place):

1. **Settings.** One :class:`GateConfig` (the ``[gate]`` table of ``sleep.toml`` and of the
   trainer's config) reaches every step unchanged: the metric a rollout is scored by
   (:func:`gate_score`), the samples, the confidence, the confirmation pairs.
2. **Where it may be tested.** The night deals its tasks into folds; the edit's reflection
   saw the other folds only, so the edit is validated on its own fold, tasks no
   reflection behind it read (:mod:`skillopt_sleep.night.learn.crossfit`).
3. **Paired samples** (:func:`compare_adaptive`, :mod:`.sampling`). The documents without
   and with the edit are rolled out on the same tasks with fresh samples; sample ``k`` of
   one is paired with sample ``k`` of the other. First ``samples_per_task`` pairs per task,
   then more, wave by wave up to ``max_samples_per_task``, only where the samples disagree
   and more could change the decision (:func:`next_samples`).
4. **The paired test** (:func:`paired_test`, :mod:`.paired`): a one-sided sign-flip test of
   the paired deltas, shifted by ``min_delta``, at ``confidence``; per task, a regression
   test corrected over the tasks that went down.
5. **Confirm.** When the candidate would pass but for a task or two that look significantly
   worse, each such task draws ``confirm_samples`` fresh pairs (ids after every screening
   sample) and is judged for regression on those alone, corrected over the tasks confirmed
   (:func:`confirm_suspects`): a real regression shows again, a first-look fumble does not.
6. **Decide** (:func:`decide_paired`, :mod:`.decide`): ``accept_new_best`` on a significant
   gain with no regressed task; ``untested`` when no paired sample moved (carried to a later
   night, not a tie); ``reject_unverified`` when a task the reflection saw was used;
   otherwise ``reject``. A sample whose call failed even when drawn again makes it
   ``untested``, unless the decision is terminal (the final check, a restore, the trainer's
   step) and every value the sample could have had gives the same action (:mod:`.missing`).
   The arithmetic is kept in ``GateDecision.arithmetic``.
7. **Together.** Accepted edits are measured together; a bundle that fails is attributed
   (:func:`attribute`, :mod:`.attribution`: edit by edit, or by halves when there are many):
   an edit whose removal makes the documents significantly better, at a Bonferroni-corrected
   confidence, is dropped and the rest is measured again on samples no earlier look saw.
   A removal is judged on what passes (:func:`pass_scores`), not on partial credit.
   The night's final check is step 6 once more: the best documents against the live ones,
   on every task.

``gate.mode = "greedy"`` or ``"off"`` skips the measured decision (:func:`decide_greedy`);
the trainer's gate-off path and a candidate equal to the current skill use
:func:`decide_trainer`.
"""

from skillopt.gate.attribution import (
    Attribution,
    attribute,
    bonferroni,
    cancelled_tasks,
    decide_on_passes,
    leave_one_out,
    lost_gains,
    pass_scores,
    planned_tests,
    promised_gains,
)
from skillopt.gate.config import GateConfig, GateMetric, GateMode, gate_score
from skillopt.gate.decide import (
    GateOutcome,
    decide_greedy,
    decide_paired,
    decide_trainer,
    paired_outcome,
    task_scores,
    trainer_outcome,
)
from skillopt.gate.paired import PairedTest, paired_test, sign_flip_p, task_settled
from skillopt.gate.sampling import (
    REDRAWS,
    PairedSamples,
    Plan,
    compare_adaptive,
    confirm_suspects,
    next_samples,
    unsettled,
)

__all__ = [
    "REDRAWS",
    "Attribution",
    "GateConfig",
    "GateMetric",
    "GateMode",
    "GateOutcome",
    "PairedSamples",
    "PairedTest",
    "Plan",
    "attribute",
    "bonferroni",
    "cancelled_tasks",
    "compare_adaptive",
    "confirm_suspects",
    "decide_greedy",
    "decide_on_passes",
    "decide_paired",
    "decide_trainer",
    "gate_score",
    "leave_one_out",
    "lost_gains",
    "next_samples",
    "paired_outcome",
    "paired_test",
    "pass_scores",
    "planned_tests",
    "promised_gains",
    "sign_flip_p",
    "task_scores",
    "task_settled",
    "trainer_outcome",
    "unsettled",
]
