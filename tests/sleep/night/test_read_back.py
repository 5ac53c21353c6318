"""Read back, do not re-ask (issue 30, lever 1): on a night the probe judged consistent, a
sample that is no decision's candidate is served from the answer the night already judged
for its (task, documents); the candidate arm is always asked; two real answers of one pair
that disagree turn read-back off; a noisy night draws as before.

Driven through the real pool and replayer with a scripted member that is the target and
the judge, counting every call it gets by (stage, documents, sample id).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from skillopt.backends.base import Completion, CompletionRequest, Usage
from skillopt.backends.pool import BackendPool
from skillopt.backends.wrappers import BudgetCompleter
from skillopt.gate import GateConfig
from skillopt.types import ReferenceKind, TaskRecord
from skillopt_sleep.ledger import build_ledger
from skillopt_sleep.night.learn.measure import LearnSettings, Measure
from skillopt_sleep.night.learn.pairs import compare
from skillopt_sleep.night.learn.samples import sample_all
from skillopt_sleep.reflect import ReflectOutcome
from skillopt_sleep.replay import Arm, Docs, Job, Replayer
from support.pools import scripted_pool

RULE = "Name the function and the file it lives in."
TASKS = [
    TaskRecord(id=f"{kind}{i}", intent=f"{kind} task {i}", reference="names the file",
               reference_kind=ReferenceKind.RUBRIC)
    for kind in ("a", "c") for i in range(3)
]  # fmt: skip
START = Docs(skill="# Skill\n", memory="")
WITH_RULE = Docs(skill=f"# Skill\n- {RULE}\n", memory="")
OTHER = Docs(skill="# Skill\n- Be brief.\n", memory="")  # changes no answer's worth

Odd = Callable[[str, str, int], bool]
"""``odd(task id, skill, sample id)``: whether the model answers otherwise this time."""


class World:
    """Tasks ``a*`` are done once the rule is in the skill, ``c*`` never; the judge scores
    a done answer 1, any other 0. ``odd`` makes the model answer otherwise at a sample."""

    name = "scripted"
    model = "scripted-world"

    def __init__(
        self, odd: Odd | None = None, misjudged: Callable[[str, int], bool] | None = None
    ) -> None:
        self.odd, self.misjudged = odd, misjudged
        self.calls: Counter[str] = Counter()
        self.asked: Counter[tuple[str, str, int]] = Counter()  # attempts: (task, skill, sample)

    async def aclose(self) -> None:
        return None

    async def complete(self, request: CompletionRequest) -> Completion:
        meta = request.metadata
        stage, task = str(meta["stage"]), str(meta["task"]["id"])
        self.calls[stage] += 1
        if stage == "judge":
            score = 1.0 if str(meta["response"]).startswith("done") else 0.0
            if self.misjudged is not None and self.misjudged(task, request.sample_id):
                score = 1.0 - score
            text = json.dumps({"score": score, "reason": "scripted"})
        else:
            skill = str(meta.get("skill", ""))
            self.asked[(task, skill, request.sample_id)] += 1
            done = RULE in skill and task.startswith("a")
            text = f"done: {task}" if done else f"not sure about {task}"
            if self.odd is not None and self.odd(task, skill, request.sample_id):
                text = f"something else for {task}"
        return Completion(text=text, usage=Usage.estimate(request.prompt, text),
                          member=self.name, latency=0.0)  # fmt: skip


async def _no_reflection(*_: Any) -> ReflectOutcome:
    raise AssertionError("nothing here reflects")


def _measure(pool: BackendPool, consistent: bool | None) -> Measure:
    spend = BudgetCompleter(pool)
    measure = Measure(
        gate=GateConfig(), replayer=Replayer(pool=spend, marker="[skillopt]"), spend=spend,
        reflect=_no_reflection, settings=LearnSettings(rounds=1, folds=2, dream_rollouts=1),
    )  # fmt: skip
    if consistent is not None:
        measure.noise.probed(consistent)
    return measure


def _asked(world: World, skill: str, sample_id: int) -> int:
    return sum(n for (_, s, k), n in world.asked.items() if s == skill and k == sample_id)


async def _rollouts_then_trial(world: World, consistent: bool | None) -> Measure:
    """START's rollouts at sample 0, then a trial START vs OTHER at samples 100."""
    async with scripted_pool(world, cache=True, concurrency=4) as pool:
        measure = _measure(pool, consistent)
        await sample_all(measure, TASKS, START, samples=1, phase="rollout")
        await compare(measure, TASKS, START, OTHER, phase="trial", offset=100)
    return measure


async def test_on_a_consistent_night_the_baseline_arm_is_read_back_and_the_candidate_asked() -> (
    None
):
    world = World()
    measure = await _rollouts_then_trial(world, True)
    assert _asked(world, START.skill, 100) == 0  # START's answers at sample 0 stood in
    assert _asked(world, OTHER.skill, 100) == len(TASKS)  # the candidate arm: real calls
    assert world.calls["attempt"] == 2 * len(TASKS)  # the rollouts and the candidate arm
    replayer = measure.replayer
    assert replayer.stand_ins.count == len(TASKS) and not replayer.stand_ins.off
    spend = {"calls": 24, "stages": {"rollout": {"calls": 6}, "trial": {"calls": 6}}}
    ledger = build_ledger(spend, replayer.costs, consistent=True)
    # saved, never a repeat: each read-back's attempt was not made
    assert ledger["read_backs"] == len(TASKS) and ledger["saved"] == len(TASKS)
    assert ledger["repeats"] == 0 and ledger["stages"]["trial"]["saved"] == len(TASKS)
    assert all(c.attempt_calls == 0 for c in replayer.costs if c.read_back)


async def test_a_read_back_answer_gets_its_own_verdict() -> None:
    """The answer is read back, not the judge's verdict on it: one mistaken verdict is not
    carried into every sample of the pair (the judge errs on c0's answer at sample 0)."""
    world = World(misjudged=lambda task, k: task == "c0" and k == 0)
    measure = await _rollouts_then_trial(world, True)
    done = measure.replayer.done.values()
    (first,) = [r for r in done if r.task_id == "c0" and r.sample_id == 0]
    (again,) = [r for r in done if r.task_id == "c0" and r.sample_id == 100
                and r.skill_hash == START.skill_hash]  # fmt: skip
    assert first.response == again.response and (first.hard, again.hard) == (1.0, 0.0)
    assert _asked(world, START.skill, 100) == 0


async def test_the_candidate_arm_is_asked_even_when_its_answer_is_known() -> None:
    world = World()
    async with scripted_pool(world, cache=True, concurrency=4) as pool:
        measure = _measure(pool, True)
        for docs in (START, OTHER):
            await sample_all(measure, TASKS, docs, samples=1, phase="rollout")
        # START is the candidate here: its known answers at sample 0 do not stand in
        await compare(measure, TASKS, OTHER, START, phase="trial", offset=100)
        # a READ_BACK sample whose key was read back is asked for real as a candidate
        job = Job(task=TASKS[0], docs=OTHER, sample_id=200, fresh=True, arm=Arm.READ_BACK)
        (stood,) = await measure.replayer.run([job])
        before = _asked(world, OTHER.skill, 200)
        (asked,) = await measure.replayer.run([Job(task=TASKS[0], docs=OTHER, sample_id=200,
                                                   fresh=True, arm=Arm.CANDIDATE)])  # fmt: skip
    assert _asked(world, START.skill, 100) == len(TASKS)
    assert _asked(world, OTHER.skill, 100) == 0  # the baseline arm read back OTHER's...
    assert before == 0 and _asked(world, OTHER.skill, 200) == 1  # ...but the candidate asks
    assert stood.response == asked.response


async def test_a_read_back_that_moves_the_decision_is_asked_for_real() -> None:
    world = World()
    async with scripted_pool(world, cache=True, concurrency=4) as pool:
        measure = _measure(pool, True)
        await sample_all(measure, TASKS, START, samples=1, phase="rollout")
        base, cand = await compare(measure, TASKS, START, WITH_RULE, phase="trial", offset=100)
    # the rule moves the three a-tasks: their baseline samples asked, the c-tasks' read back
    assert sorted(t for (t, s, k) in world.asked if s == START.skill and k == 100) == [
        "a0", "a1", "a2"
    ]  # fmt: skip
    assert all(base.scores[t] == (0.0,) and cand.scores[t] == (1.0,) for t in ("a0", "a1", "a2"))


async def test_two_real_answers_that_disagree_turn_read_back_off_for_the_night() -> None:
    # the model answers c1 otherwise under OTHER at sample 100 (the candidate arm's)
    world = World(lambda task, skill, k: task == "c1" and skill == OTHER.skill and k == 100)
    async with scripted_pool(world, cache=True, concurrency=4) as pool:
        measure = _measure(pool, True)
        await sample_all(measure, TASKS, OTHER, samples=1, phase="rollout")
        await compare(measure, TASKS, START, OTHER, phase="trial", offset=100)
        off = measure.replayer.stand_ins.off
        assert "task c1" in off and "sample 0 (rollout)" in off and "sample 100 (trial)" in off
        measure.end("trial")
        # from now on every sample is asked: OTHER's baseline arm at 200 included
        await compare(measure, TASKS, OTHER, START, phase="trial", offset=200)
    assert _asked(world, OTHER.skill, 200) == len(TASKS)
    notes = [n for n in measure.findings.notes if n.startswith("read-back turned off")]
    assert len(notes) == 1 and "task c1" in notes[0]


async def test_a_noisy_night_asks_every_sample_as_before() -> None:
    counts: list[Counter[str]] = []
    for consistent in (False, None):
        world = World()
        measure = await _rollouts_then_trial(world, consistent)
        assert _asked(world, START.skill, 100) == len(TASKS)  # the baseline arm asked
        assert measure.replayer.stand_ins.count == 0
        assert build_ledger({}, measure.replayer.costs)["saved"] == 0
        assert not measure.findings.notes
        counts.append(world.calls)
    # the two arms' answers are alike: one judge verdict at sample 100 (the response cache)
    assert counts[0] == counts[1] == {"attempt": 3 * len(TASKS), "judge": 2 * len(TASKS)}


async def test_a_resumed_night_reads_back_from_the_journalled_answers() -> None:
    rows: list[dict[str, Any]] = []
    world = World()
    async with scripted_pool(world, cache=True, concurrency=4) as pool:
        first = Replayer(pool=pool, marker="[skillopt]", record=rows.extend)
        await first.run([Job(task=t, docs=START, sample_id=0, fresh=True) for t in TASKS])
        # the killed run's journal holds answers only, never a read-back
        await first.run([Job(task=t, docs=START, sample_id=5, fresh=True, arm=Arm.READ_BACK)
                         for t in TASKS])  # fmt: skip
        assert len(rows) == len(TASKS) and first.stand_ins.count == len(TASKS)
        resumed = Replayer(pool=pool, marker="[skillopt]")
        resumed.preload(rows)
        calls = sum(world.calls.values())
        results = await resumed.run(
            [Job(task=t, docs=START, sample_id=5, fresh=True, arm=Arm.READ_BACK) for t in TASKS]
        )
    assert sum(world.calls.values()) == calls  # read back again, no call
    assert [r.sample_id for r in results] == [5] * len(TASKS) and not any(r.error for r in results)


async def test_a_disagreement_in_the_journal_keeps_read_back_off_on_resume() -> None:
    rows: list[dict[str, Any]] = []
    world = World(lambda task, skill, k: task == "a0" and k == 1)
    async with scripted_pool(world, cache=True, concurrency=4) as pool:
        first = Replayer(pool=pool, marker="[skillopt]", record=rows.extend)
        await first.run([Job(task=TASKS[0], docs=START, sample_id=k, fresh=True) for k in (0, 1)])
        resumed = Replayer(pool=pool, marker="[skillopt]")
        resumed.preload(rows)
        assert "task a0" in resumed.stand_ins.off
        await resumed.run([Job(task=TASKS[0], docs=START, sample_id=2, fresh=True,
                               arm=Arm.READ_BACK)])  # fmt: skip
    assert world.asked[("a0", START.skill, 2)] == 1
