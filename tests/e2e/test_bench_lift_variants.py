"""The held-out worlds of ``bench/lift_variants.py`` are well formed and written as described.

A world whose wordings name the wrong task, a convention no two tasks need (never
proposable), a bait that does not tempt, or a history without the odd files it promises
would make the benchmark measure nothing; these fail first.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from skillopt.prompts import render_prompt
from skillopt_sleep.harvest import SourceKind, SourceSpec, harvest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from lift_world.history import Oddities, write_history
from lift_world.model import WorldModel
from lift_world.wide import QUIET_TEXT, WIDE
from lift_world.world import HARMFUL_TEXT, LIFT

MARKER = "<!-- marker -->"
SKILL = "---\nname: s\n---\n\n# House skill\n\nBe brief.\n"


def test_wide_world_has_its_promised_shape_and_every_wording_names_its_task() -> None:
    assert len(WIDE.tasks) == 40 and len(WIDE.conventions) == 8 and len(WIDE.baits) == 2
    assert sum(len(t.needs) == 3 for t in WIDE.tasks) >= 4
    needed = Counter(k for t in WIDE.tasks for k in t.needs)
    assert set(needed) == set(WIDE.by_key) and min(needed.values()) >= 2
    assert {t.bait for t in WIDE.tasks if t.bait} == {"bare", "quiet"}
    for task in WIDE.tasks:
        for wording in task.variants:
            assert WIDE.find_task(wording) is task, (task.id, wording)
    everything = "\n".join(c.text for c in WIDE.conventions)
    assert WIDE.true_score(everything).solved == 40
    assert WIDE.true_score(everything, QUIET_TEXT).solved == 0
    assert WIDE.true_score(everything, HARMFUL_TEXT).solved == 0
    assert LIFT.true_score(everything).solved == len(LIFT.tasks)  # the lift world unchanged


def test_the_second_bait_tempts_reflection_and_a_new_convention_is_judged() -> None:
    model = WorldModel(world=WIDE)
    ci_main, nightly = WIDE.by_id["t31"], WIDE.by_id["t32"]
    failures = "\n\n".join(
        f"- asked: {t.variants[0]}\n  answered: {WIDE.render_answer(t, ())}\n  judged: low"
        for t in (ci_main, nightly)
    )
    prompt = render_prompt(
        "reflect", marker=MARKER, target="skill", edit_budget=4, document=SKILL,
        other_document="# notes", preferences="(none)", contract="(none)", criteria="-",
        failures=failures, successes="(none)", retry_note="",
    )  # fmt: skip
    edits = json.loads(model.answer(prompt))
    assert [e["content"] for e in edits] == [QUIET_TEXT, WIDE.by_key["cilog"].text]
    skill = SKILL + "\n- " + WIDE.by_key["cilog"].text + "\n"
    attempt = render_prompt(
        "attempt", marker=MARKER, skill=skill, memory="# notes", intent=ci_main.variants[1],
        context="",
    )  # fmt: skip
    answer = model.answer(attempt)
    assert WIDE.grade(ci_main, answer) == (1.0, [])
    assert WIDE.grade(ci_main, WIDE.render_answer(ci_main, ()))[0] == 0.0


def test_noise_can_be_limited_to_some_tasks() -> None:
    model = WorldModel(world=LIFT)
    model.configure(world_seed=0, noise=0.5, seed=3, noisy_tasks=frozenset({"t02"}))
    for task_id in ("t02", "t04"):
        intent = LIFT.by_id[task_id].variants[0]
        prompt = render_prompt(
            "attempt", marker=MARKER, skill=SKILL, memory="# n", intent=intent, context=""
        )
        for _ in range(40):
            model.answer(prompt)
        flips = model.take_stats()["flips"]
        assert (flips > 5) if task_id == "t02" else (flips == 0), (task_id, flips)


def test_odd_history_holds_its_oddities_and_still_harvests(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "home" / "work" / "shop-api"
    odd = Oddities(duplicates=3, truncated=2, empty=1, huge=1, huge_mb=0.5)
    history = write_history(
        home, project, now=datetime.now(UTC), seed=4, per_task=(2, 2), noise=5, odd=odd
    )
    files = [p for p in home.rglob("*.jsonl")]
    assert len(history.secrets) == 3
    assert sum(p.stat().st_size == 0 for p in files) >= 2  # per source: Claude and Codex
    assert any(p.stat().st_size > 500_000 for p in files)

    def broken(path: Path) -> bool:
        lines = path.read_text(encoding="utf-8").splitlines()
        return bool(lines) and not lines[-1].endswith("}")

    assert sum(broken(p) for p in files) == 2
    texts = "".join(p.read_text(encoding="utf-8") for p in files)
    assert all(secret in texts for secret in history.secrets)
    specs = [
        SourceSpec(kind=SourceKind.CLAUDE_CODE, home=home / ".claude"),
        SourceSpec(kind=SourceKind.CODEX, home=home / ".codex"),
    ]
    found = harvest(specs, since=None, project=project, limit=1000)
    assert len(found.digests) >= history.task_sessions


def test_one_agent_only_histories(tmp_path: Path) -> None:
    for share, present, absent in ((0.0, ".codex", ".claude"), (1.0, ".claude", ".codex")):
        home = tmp_path / str(share)
        history = write_history(
            home, home / "work" / "shop-api", now=datetime.now(UTC), seed=2, per_task=(2, 2),
            noise=3, claude_share=share,
        )  # fmt: skip
        assert list((home / present).rglob("*.jsonl"))
        assert not list((home / absent).rglob("*.jsonl"))
        assert (history.claude, history.codex)[int(share == 0.0)] == history.sessions


def test_the_skills_world_shares_one_rule_and_its_sessions_load_their_skills(
    tmp_path: Path,
) -> None:
    from lift_world.skills import (
        SHARED,
        SKILL_OF,
        SKILL_SPECS,
        SKILLS_WORLD,
        misplaced,
        true_score_routed,
    )

    w = SKILLS_WORLD
    needers = {SKILL_OF.get(t.id, "") for t in w.tasks if SHARED in t.needs}
    assert needers >= {s.name for s in SKILL_SPECS}  # every skill's tasks need it
    for spec in SKILL_SPECS:  # a skill's own rule: only its own tasks need it
        assert {SKILL_OF.get(t.id, "") for t in w.tasks if spec.own in t.needs} == {spec.name}
    text = {c.key: c.text for c in w.conventions}
    skills = {s.name: s.seed + "\n" + text[s.own] for s in SKILL_SPECS}
    skills[""] = "\n".join(text[k] for k in ("check", "lookup"))
    shared_in_memory = true_score_routed(w, SKILL_OF, skills.__getitem__, text[SHARED])
    assert shared_in_memory.solved == shared_in_memory.total
    assert misplaced(w, skills) == []
    one = dict(skills, **{"release-notes": skills["release-notes"] + "\n" + text[SHARED]})
    in_one_skill = true_score_routed(w, SKILL_OF, one.__getitem__, "")
    assert in_one_skill.solved < in_one_skill.total
    assert misplaced(w, one) == [f"{SHARED} in release-notes"]

    home = tmp_path / "home"
    write_history(home, home / "work" / "shop-api", now=datetime.now(UTC), seed=3,
                  per_task=(2, 2), noise=2, world=w, skills=SKILL_OF)  # fmt: skip
    loaded = Counter(
        block["input"]["skill"]
        for path in (home / ".claude").rglob("*.jsonl")
        for line in path.read_text().splitlines()
        if '"Skill"' in line
        for block in json.loads(line)["message"]["content"]
        if block.get("name") == "Skill"
    )
    assert set(loaded) == {s.name for s in SKILL_SPECS}
