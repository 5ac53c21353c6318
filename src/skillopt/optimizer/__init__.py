"""Optimizer pieces: edit-budget schedules (:mod:`.budget`) and rank-and-select (:mod:`.rank`)."""
