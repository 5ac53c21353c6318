"""Held-out benchmark worlds for the gate: a seed draws a world (``draw_world``).

``world`` defines what is true in a drawn world (tasks, conventions, spoilers, judges,
mining quirks) and how the live documents score; ``model`` plays it over HTTP as the
target and the optimizer model, with flips and transient faults applied per seed.
``bench/trust.py`` runs first nights on many seeds and prints only verdict lines.
"""

from worlds.world import FEATURES, GenWorld, draw_world

__all__ = ["FEATURES", "GenWorld", "draw_world"]
