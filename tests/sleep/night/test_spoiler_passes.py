"""A removal in an attribution is judged on what passes, not on partial credit.

A rule that makes every answer a near-miss keeps most of an answer's partial credit while
it stops the answer from passing; judged on the mixed metric, taking it out of a bundle
of good rules gains little on a noisy model, judged on passes it gains a whole task."""

from __future__ import annotations

import dataclasses
import math

from skillopt.gate import GateConfig, decide_paired, pass_scores
from skillopt.types import RolloutResult
from skillopt_sleep.night.learn.samples import Measured
from skillopt_sleep.replay import Docs

DOCS = Docs(skill="# Skill\n", memory="")


def _arm(rows: list[tuple[str, int, float, float, str]]) -> Measured:
    """``rows``: (task, sample id, hard, soft, error), scored on the mixed metric."""
    gate = GateConfig()
    results = tuple(
        RolloutResult(task_id=t, sample_id=k, hard=h, soft=s, error=e) for t, k, h, s, e in rows
    )
    scores: dict[str, list[float]] = {}
    for r in sorted(results, key=lambda r: (r.task_id, r.sample_id)):
        value = math.nan if r.error else gate.score(r.hard, r.soft)
        scores.setdefault(r.task_id, []).append(value)
    return Measured(docs=DOCS, scores={t: tuple(v) for t, v in scores.items()}, results=results)


def passes(measured: Measured) -> dict[str, tuple[float, ...]]:
    """One arm read as passes, as a removal's test reads it."""
    return pass_scores(measured.scores, measured.results)


def test_passes_reads_each_sample_as_passed_or_not_in_sample_order() -> None:
    arm = _arm([("t", 3, 0.0, 0.9, ""), ("t", 1, 1.0, 1.0, ""), ("u", 1, 0.0, 0.0, "timeout")])
    got = passes(arm)
    assert got["t"] == (1.0, 0.0)  # sample 1 passed, sample 3 was a near-miss
    assert len(got["u"]) == 1 and math.isnan(got["u"][0])  # a failed call stays missing


def test_passes_falls_back_to_the_scores_when_the_results_do_not_cover_them() -> None:
    arm = Measured(docs=DOCS, scores={"t": (0.5, 0.25)}, results=())
    assert passes(arm) == {"t": (0.5, 0.25)}


def test_a_near_miss_spoiler_hidden_by_partial_credit_shows_on_passes() -> None:
    """Eight tasks, two pairs each: with the spoiler every answer is a near-miss (soft
    0.9); without it the good rules make half the samples pass and leave the rest a plain
    miss. On the mixed metric the removal is a coin toss; on passes it is significant."""
    whole, without = [], []
    for i in range(8):
        for k in (1, 2):
            whole.append((f"t{i}", k, 0.0, 0.9, ""))
            passed = (i + k) % 2 == 0
            without.append((f"t{i}", k, 1.0 if passed else 0.0, 1.0 if passed else 0.0, ""))
    u, w = _arm(whole), _arm(without)
    ids = [f"t{i}" for i in range(8)]
    config = GateConfig(confidence=0.9)
    on_mixed = decide_paired(u.scores, w.scores, config=config, task_ids=ids)
    on_passes = decide_paired(passes(u), passes(w), config=config, task_ids=ids)
    assert not on_mixed.accepted
    assert on_passes.accepted


def test_records_that_do_not_line_up_with_the_scores_leave_the_scores() -> None:
    """Sample 6 failed, and its error row came back without its sample id (0): sorted by
    sample id it would stand first and shift every pass along, so the scores stand."""
    arm = _arm([("t", 5, 1.0, 1.0, ""), ("t", 7, 0.0, 0.2, "")])
    five, seven = arm.scores["t"]
    failed = RolloutResult(task_id="t", sample_id=0, error="timeout")
    shifted = dataclasses.replace(
        arm, scores={"t": (five, math.nan, seven)}, results=(*arm.results, failed)
    )
    got = passes(shifted)["t"]
    assert got[0] == five and math.isnan(got[1]) and got[2] == seven
