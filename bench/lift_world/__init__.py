"""The world of ``bench/lift.py``: house conventions, recurring tasks, their history, a model.

``world`` defines what is true (which convention each task needs, how to score documents),
``history`` writes three weeks of Claude Code and Codex sessions about it, and ``model``
answers our prompt templates over HTTP as the target and the optimizer would.
"""
