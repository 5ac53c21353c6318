"""Quiet nights and the noise behind the gate: answers the archive already holds.

- :mod:`.recorded`: samples kept by their question, a night whose tasks all pass steadily
  ended after harvest, per-task noise estimates, the staged documents' steady samples
- :mod:`.probe`: the noise probe, how many samples of each task a rollouts wave draws
- :mod:`.questions`: when two measurements ask the same question (task, docs, models, settings)
"""
