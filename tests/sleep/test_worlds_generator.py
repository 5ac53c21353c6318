"""The held-out world family of ``bench/trust.py`` (``bench/worlds``): offline and fast."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from worlds.model import TrustModel  # noqa: E402
from worlds.world import FEATURES, SPOILER_KINDS, draw_world  # noqa: E402

SEEDS = range(60)


def test_a_seed_draws_the_same_world_every_time() -> None:
    for seed in (0, 7, 41):
        assert repr(draw_world(seed)) == repr(draw_world(seed))
    assert repr(draw_world(1)) != repr(draw_world(2))


def test_every_feature_is_drawn_across_seeds_and_worlds_vary() -> None:
    worlds = [draw_world(s) for s in SEEDS]
    seen = set().union(*(w.features for w in worlds))
    assert seen == set(FEATURES)
    assert min(len(w.tasks) for w in worlds) <= 18 and max(len(w.tasks) for w in worlds) >= 26
    assert all(16 <= len(w.tasks) <= 28 for w in worlds)
    assert len({frozenset(s.key for s in w.spoilers) for w in worlds}) > 3
    assert len({w.shared for w in worlds}) > 2
    for w in worlds:
        assert len(w.spoilers) >= 2
        assert {s.key for s in w.spoilers} <= set(SPOILER_KINDS)
        for s in w.spoilers:  # every spoiler is harmful in truth, and its text is detected
            assert s.breaks and w.spoilers_in(s.text) == {s.key}
        good = "\n".join(c.text for c in w.conventions)
        best = w.true_score(good)
        assert not best.harmful and best.solved == len(w.tasks) - bool(w.impossible)
        for s in w.spoilers:
            assert w.true_score(good, s.text).solved < best.solved


def test_the_counterfactual_spoiler_turns_every_answer_into_a_near_miss() -> None:
    w = next(w for w in map(draw_world, SEEDS) if "spoiler:counterfactual" in w.features)
    model = TrustModel(w)
    cf = next(s for s in w.spoilers if s.key == "counterfactual")
    task = next(t for t in w.tasks if len(t.needs) >= 2 and not t.value and t.id != w.impossible)
    docs = "\n".join(c.text for c in w.conventions)
    right = w.grade(task, w.render_answer(task, task.needs))[0]
    bare = w.grade(task, w.render_answer(task, ()))[0]
    near = w.grade(task, w.render_answer(task, task.needs, mode="near"))[0]
    assert bare < near < right == 1.0
    prompt = f"# Skill\n{docs}\n{cf.text}\n\n# Task\n{task.variants[0]}\n"
    assert w.grade(task, model.answer(prompt))[0] == near
