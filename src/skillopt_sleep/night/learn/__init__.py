"""The night's learning: rollouts, rounds of cross-fitted learning, the final check.

- :mod:`.rounds`: rollouts -> rounds (:func:`~.crossfit.learn_step` over both targets) -> the final
  paired check -> :class:`~.decision.Decision`
- :mod:`.crossfit`: one target document in one round (folds, reflection per fold, singles on
  held-out folds, the union, leave-one-out)
- :mod:`.candidate`: one proposed edit with its provenance
- :mod:`.budget_plan`: the singles a tight budget can afford, best first
- :mod:`.decision`: what a night's learning decided
- :mod:`.gate_modes`: gate mode greedy (no final check) and off (no validation)
- :mod:`.agree`: the kept edits applied in one order
- :mod:`.supersede`: archived tasks whose expectation tonight's evidence contradicts
- :mod:`.judging`: a night whose model judge keeps failing fails at that stage
- :mod:`.trials`: one gate trial, as ``trials.json`` and the report record it
"""
