"""One training step, stage by stage; a module per stage, read in this order.

1. :mod:`.rollout` — every micro-batch's items attempted with the current skill, at once
   (:mod:`skillopt.trainer.rollouts`: rows journaled as they land, so a resumed step
   attempts only what is missing).
2. :mod:`.reflect` — analysts read seeded minibatches of failures (and successes) with the
   step buffer and propose patches: edits, and execution-lapse notes for the appendix.
3. :mod:`.select` (merge) — the patches merged into one list of edits.
4. :mod:`.select` (select) — the step's edit budget (scheduled, or the optimizer's own), the
   edits ranked when there are more than it allows.
5. :mod:`.update` — the candidate skill: the edits applied as a patch, a whole-skill rewrite,
   or the optimizer's rewrite from the edits; the notes joined to its appendix.
6. :mod:`.conclude` — the candidate evaluated against the current skill and gated; the
   verdict becomes the run state after the step and its record.

:mod:`.run` composes them (:func:`~.run.run_step`, timed per stage, the one place a step is
skipped: no patch, or no candidate); :mod:`.context` holds what they share (the step's
:class:`~.context.StepInput`, the record, the optimizer call); the run's context is
:mod:`skillopt.trainer.run_context`. Every stage writes its files under the step directory
before it returns, so a resumed run finds finished work. Nothing is imported here, so
importing one stage does not load the others.
"""
