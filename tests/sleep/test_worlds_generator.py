"""The held-out world family of ``bench/trust.py`` (``bench/worlds``): offline and fast."""

from __future__ import annotations

import random
import sys
import threading
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from worlds.model import TrustModel  # noqa: E402
from worlds.world import FEATURES, SPOILER_KINDS, GenWorld, draw_world  # noqa: E402

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


def _requests(w: GenWorld) -> list[str]:
    """Attempt prompts and judge prompts for every task, each sent several times over (as
    the product's samples send them): documents that differ in wording only, every
    wording of a task, the same answer judged under each wording."""
    good = "\n".join(c.text for c in w.conventions)
    docs = ("Keep answers short.", "Be brief.", good, f"{good}\nBe brief.")
    attempts = [
        f"Work the task.\n\n# Skill\n{d}\n\n# Task\n{v}\n"
        for d in docs
        for t in w.tasks
        for v in t.variants[:2]
    ]
    judged = [
        f"Grade one answer.\n\n# What the user asked\n{v}\n\n# What a good answer does\n"
        f"- does what was asked: {t.summary}\n\n# The answer\n{a}\n\n"
        'Reply with one JSON object:\n{"score": 0.0, "reason": ""}\n'
        for t in w.tasks
        for a in (w.render_answer(t, t.needs), w.render_answer(t, ()))
        for v in t.variants[:2]
    ]
    return attempts * 8 + judged * 6


def _night(w: GenWorld, requests: list[str], *, jobs: int) -> dict[str, Counter[str]]:
    """Every request sent until it is answered (a faulted one retried), ``jobs`` at a time;
    what each distinct request met: its faults and its replies."""
    model = TrustModel(w)
    model.configure(world_seed=w.seed, noise=0.2, seed=w.seed * 100 + 2)
    model.faults, model.condition = 0.2, "flips20"
    met: dict[str, Counter[str]] = defaultdict(Counter)
    lock = threading.Lock()

    def send(text: str) -> None:
        for _ in range(30):
            fault = model.fault(SimpleNamespace(user_text=text))
            if fault is None:
                event = f"reply {model.answer(text)}"
            else:
                event = f"fault {fault.status} {fault.latency}"
            with lock:
                met[text][event] += 1
            if fault is None or fault.status == 400:
                return

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(send, requests))
    return dict(met)


def test_the_draws_are_a_function_of_the_request_not_of_the_arrival_order() -> None:
    w = next(w for w in map(draw_world, SEEDS) if w.judge_error >= 0.1 and w.doomed)
    requests = _requests(w)
    shuffled = random.Random(5).sample(requests, k=len(requests))
    first = _night(w, requests, jobs=1)
    assert _night(w, shuffled, jobs=8) == first  # same faults, flips and verdicts
    assert _night(w, list(reversed(requests)), jobs=3) == first

    # the conditions keep their rates: per attempt of a request, per sample, per verdict
    sent = [(t, m) for t, m in first.items() if "fault 400 None" not in m]  # not the doomed
    assert all(any(e.startswith("reply") for e in m) for _, m in sent)  # a retry gets through
    faults = sum(n for _, m in sent for e, n in m.items() if e.startswith("fault"))
    assert 0.15 < faults / sum(m.total() for _, m in sent) < 0.25
    replies = [(t, Counter({e: n for e, n in m.items() if e.startswith("reply")})) for t, m in sent]
    answers = [r for t, r in replies if "# Task" in t]  # 8 samples each
    flipped = sum(min(r.values()) for r in answers if len(r) > 1)  # the minority answers
    assert 0.1 < flipped / sum(r.total() for r in answers) < 0.3
    verdicts = [r for t, r in replies if "# The answer" in t]
    erred = sum(min(r.values()) for r in verdicts if len(r) > 1)  # the minority verdicts
    assert 0.5 * w.judge_error < erred / sum(r.total() for r in verdicts) < 2 * w.judge_error

    # another condition draws anew
    model = TrustModel(w)
    model.configure(world_seed=w.seed, noise=0.2, seed=w.seed * 100 + 2)
    model.faults, model.condition = 0.2, "flips30"
    again = [model.fault(SimpleNamespace(user_text=t)) is None for t in requests[:200]]
    model.condition = "flips20"
    model.configure(world_seed=w.seed, noise=0.2, seed=w.seed * 100 + 2)
    assert again != [model.fault(SimpleNamespace(user_text=t)) is None for t in requests[:200]]


def test_a_runs_own_home_path_is_no_part_of_a_requests_identity() -> None:
    w = draw_world(9)
    texts = [f"# Session\nProject: {{home}}/work/shop-api\n\n{t.variants[0]}\n" for t in w.tasks]
    faulted = []
    for home in ("/tmp/tmpa1/seed9/home", "/tmp/tmpb2/seed9/home"):
        model = TrustModel(w)
        model.configure(world_seed=w.seed, noise=0.0, seed=900)
        model.faults, model.condition, model.home = 0.4, "faults40", home
        requests = [SimpleNamespace(user_text=t.format(home=home)) for t in texts * 3]
        faulted.append([model.fault(r) is None for r in requests])
    assert faulted[0] == faulted[1] and not all(faulted[0]) and any(faulted[0])
