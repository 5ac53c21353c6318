"""The lift benchmark's world reads our real prompt templates and answers each role in kind.

If a template changes so that the world can no longer tell the roles apart or find the
documents and tasks in it, these fail before the benchmark silently measures nonsense.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from skillopt.prompts import render_prompt
from skillopt_sleep.harvest import SourceKind, SourceSpec, harvest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from lift_world.history import write_history
from lift_world.model import WorldModel, fill, reply_shape
from lift_world.world import BY_ID, BY_KEY, CONVENTIONS, HARMFUL_TEXT, TASKS, true_score

MARKER = "<!-- marker -->"
SKILL_HEAD = "---\nname: s\n---\n\n# House skill\n\nBe brief.\n"


def rules(*keys: str) -> str:
    return SKILL_HEAD + "\n## Learned\n" + "".join(f"- {BY_KEY[k].text}\n" for k in keys)


def attempt(task_id: str, skill: str, memory: str = "# notes\n\nA shop.") -> str:
    task = BY_ID[task_id]
    return render_prompt(
        "attempt", marker=MARKER, skill=skill, memory=memory, intent=task.variants[1], context=""
    )


def judge(intent: str, answer: str) -> dict[str, object]:
    prompt = render_prompt(
        "judge", marker=MARKER, intent=intent, rubric="- does what was asked", response=answer
    )
    reply = json.loads(WorldModel().answer(prompt))
    assert isinstance(reply, dict)
    return reply


def reflect(failures: str, skill: str = SKILL_HEAD, budget: int = 4) -> list[dict[str, str]]:
    prompt = render_prompt(
        "reflect",
        marker=MARKER,
        target="skill",
        edit_budget=budget,
        document=skill,
        other_document="# notes\n\nA shop.",
        preferences="(none stated)",
        contract="(none)",
        criteria='- "rubric" (failed 3x)',
        failures=failures,
        successes="(none)",
        retry_note="",
    )
    reply = json.loads(WorldModel().answer(prompt))
    assert isinstance(reply, list)
    return reply


def failure(task_id: str) -> str:
    return f"- asked: {BY_ID[task_id].variants[0]}\n  answered: Done.\n  judged: below threshold"


def test_target_follows_exactly_the_conventions_in_the_documents() -> None:
    model = WorldModel()
    # t03 needs check + migration: one is not enough, both are, the harmful rule breaks it
    half = model.answer(attempt("t03", rules("check")))
    full = model.answer(attempt("t03", rules("check", "migration")))
    bare = model.answer(attempt("t03", rules("check", "migration") + f"- {HARMFUL_TEXT}\n"))
    intent = BY_ID["t03"].variants[0]
    assert judge(intent, half)["score"] == 0.5
    assert judge(intent, full)["score"] == 1.0
    assert judge(intent, bare)["score"] == 0.0
    # a convention written in the project notes counts as much as one in the skill
    memory = "# notes\n\n" + BY_KEY["migration"].text
    assert judge(intent, model.answer(attempt("t03", rules("check"), memory)))["score"] == 1.0
    assert model.take_stats()["calls"] == {"attempt": 4}


def test_noise_flips_about_the_asked_share_reproducibly() -> None:
    def run(seed: int) -> list[str]:
        model = WorldModel()
        model.configure(world_seed=0, noise=0.2, seed=seed)
        return [model.answer(attempt("t02", SKILL_HEAD)) for _ in range(400)]

    first = run(1)
    right = sum("scripts/check.sh" in a for a in first)
    assert 50 <= right <= 110  # 20% of 400, wrong answers flipped to right
    assert run(1) == first and run(2) != first


def test_reflection_needs_cross_task_evidence_and_takes_the_bait() -> None:
    one = reflect(failure("t02"))  # one task needing `check`: not a house rule yet
    assert one == []
    two = reflect(failure("t02") + "\n\n" + failure("t04"))
    assert [e["content"] for e in two] == [BY_KEY["check"].text]
    baited = reflect(failure("t21") + "\n\n" + failure("t22") + "\n\n" + failure("t15"))
    assert [e["content"] for e in baited] == [HARMFUL_TEXT, BY_KEY["lookup"].text]
    # conventions already written are not proposed again; the budget is honoured
    assert reflect(failure("t02") + "\n\n" + failure("t04"), skill=rules("check")) == []
    many = "\n\n".join(failure(t.id) for t in TASKS)
    assert len(reflect(many, budget=3)) == 3


def test_miner_answers_each_session_of_a_batched_prompt() -> None:
    def entry(label: str, *intents: str) -> str:
        return render_prompt(
            "mine_batch_entry", label=label, asked_in="",
            intents="\n".join(f"{i + 1}. {t}" for i, t in enumerate(intents)),
            final_answer="Done.", feedback="neg:broke", tools="Read",
        )  # fmt: skip

    task = BY_ID["t06"]
    prompt = render_prompt(
        "mine_batch", marker=MARKER, project="/work/shop-api", ops="contains, regex",
        sessions="\n\n".join([
            entry("S1", "What does the walrus operator do?"),
            entry("S2", f"hey, {task.variants[2]}", BY_KEY["news"].corrections[1]),
        ]),
    )  # fmt: skip
    reply = json.loads(WorldModel(world_seed=3).answer(prompt))
    one_off, recurring = reply["sessions"]
    assert one_off == {"session": "S1", "tasks": []}
    assert recurring["session"] == "S2"
    (mined,) = recurring["tasks"]
    assert mined["intent"] == WorldModel(world_seed=3).wording(task)
    assert BY_KEY["news"].rubric in mined["rubric"] and mined["satisfied"] is False


def test_replies_follow_the_schema_the_prompt_shows() -> None:
    prompt = 'Reply with one JSON object:\n{"verdict": {"score": <0..1>, "why": "<text>"}}'
    assert reply_shape(prompt) == {"verdict": {"score": None, "why": "<text>"}}
    shape = {"edits": [{"op": "add", "content": "", "motivated_by": []}], "note": ""}
    filled = fill(shape, [{"op": "add", "content": "x", "rationale": "r"}])
    assert filled == {"edits": [{"op": "add", "content": "x", "motivated_by": []}], "note": ""}


def test_true_score_reads_conventions_and_the_harmful_rule() -> None:
    assert true_score(SKILL_HEAD).solved == 0
    everything = rules(*(c.key for c in CONVENTIONS))
    assert true_score(everything).solved == len(TASKS)
    assert true_score(everything, HARMFUL_TEXT).solved == 0
    assert true_score(rules("news")).solved == sum(t.needs == ("news",) for t in TASKS)


def test_history_is_what_the_harvesters_read(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    project = tmp_path / "home" / "work" / "shop-api"
    history = write_history(tmp_path / "home", project, now=now, seed=5)
    assert 90 <= history.sessions <= 120 and history.older_than_72h > history.sessions // 2
    specs = [
        SourceSpec(kind=SourceKind.CLAUDE_CODE, home=tmp_path / "home" / ".claude"),
        SourceSpec(kind=SourceKind.CODEX, home=tmp_path / "home" / ".codex"),
    ]
    found = harvest(specs, since=None, project=project, limit=1000)
    sources = {d.source for d in found.digests}
    assert sources == {SourceKind.CLAUDE_CODE, SourceKind.CODEX}
    recent = harvest(specs, since=now - timedelta(hours=72), project=project, limit=1000)
    assert 0 < len(recent.digests) < len(found.digests)
    # every task recurs, with more than one wording, and users corrected the agent
    for task in TASKS:
        asked = [
            d.user_intents[0] for d in found.digests if task.subject in d.user_intents[0].casefold()
        ]
        assert len(asked) >= 2 and len(set(asked)) >= 2, task.id
    assert any(s.label() == "neg:broke" for d in found.digests for s in d.feedback)
