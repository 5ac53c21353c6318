"""The user's own bytes survive a night: redaction covers what is sent and logged, never
what a proposal (or the skill store, or ``adopt``) writes back outside the learned block."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt.skilldoc import Region, region_spans
from skillopt_sleep.adopt import adopt
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.night.entry import NightResult, run_night
from skillopt_sleep.staging import SkillStore, staged_text
from skillopt_sleep.state import project_dir

PASSWORD_LINE = "- Staging database: password = hunter2hunter2"
AWS_LINE = "- Deploy key for the bucket: AKIAIOSFODNN7EXAMPLE"


def _outside_learned(text: str) -> str:
    spans = region_spans(text, Region.LEARNED)
    assert len(spans) == 1, text
    s, e = spans[0]
    return text[:s] + text[e:]


@pytest.fixture
def demo(tmp_path: Path) -> DemoSetup:
    setup = prepare_demo(tmp_path)
    skill = setup.config.live_skill_path(setup.project)
    skill.write_text(skill.read_text() + f"{PASSWORD_LINE}\n{AWS_LINE}\n", encoding="utf-8")
    memory = setup.config.live_memory_path(setup.project)
    memory.write_text(memory.read_text() + f"\n{PASSWORD_LINE}\n", encoding="utf-8")
    return setup


async def test_a_proposal_keeps_the_users_secret_shaped_lines(demo: DemoSetup) -> None:
    skill = demo.config.live_skill_path(demo.project)
    memory = demo.config.live_memory_path(demo.project)
    live_skill, live_memory = skill.read_text(), memory.read_text()
    outcome = await run_night(demo.config, project=demo.project, demo=True)
    assert outcome.result is NightResult.ACCEPTED and outcome.run_dir is not None
    manifest = json.loads((outcome.run_dir / "proposal" / "manifest.json").read_text())
    staged = {
        e["kind"]: (outcome.run_dir / e["proposed_file"]).read_text() for e in manifest["entries"]
    }
    assert "skill" in staged
    for kind, live in (("skill", live_skill), ("memory", live_memory)):
        if kind not in staged:
            continue
        text = staged[kind]
        assert PASSWORD_LINE in text and "[REDACTED" not in _outside_learned(text)
        # only the learned block differs from the live document
        assert _outside_learned(text).strip() == live.strip() or live.strip() in text
    assert AWS_LINE in staged["skill"]
    # the skill store holds the same bytes as the proposal
    store = SkillStore(project_dir(demo.config.state_path(), demo.project))
    name = skill.parent.name
    latest = store.latest(name)
    assert latest is not None and store.read(name, latest.number) == staged["skill"]
    # the night said once that the model never saw those strings
    report = json.loads((outcome.run_dir / "report.json").read_text())
    warnings = [n for n in report["notes"] if "withheld from the model" in n]
    assert len(warnings) == 1, report["notes"]
    assert str(skill) in warnings[0] and "hunter2" not in warnings[0]
    # adopting writes the user's lines back unchanged
    roots = [str(r) for r in demo.config.adopt_roots(demo.project)]
    adopt(outcome.run_dir, skill_roots=roots)
    assert PASSWORD_LINE in skill.read_text() and AWS_LINE in skill.read_text()
    if "memory" in staged:
        assert PASSWORD_LINE in memory.read_text()


def test_staged_text_replaces_only_the_learned_block() -> None:
    live = f"# Notes\r\n{PASSWORD_LINE}\n\n\n  trailing spaces   \n"
    learned = f"{Region.LEARNED.start}\n- use ruff\n- token ghp_{'a' * 36}\n{Region.LEARNED.end}"
    proposed = f"# Notes\n[REDACTED:password]\n\n{learned}\n"
    text = staged_text(live, proposed)
    s, e = region_spans(text, Region.LEARNED)[0]
    assert text[:s].startswith(live.rstrip("\n")) and text[e:] in ("", "\n")
    block = text[s:e]
    assert "- use ruff" in block and "ghp_" not in block and "[REDACTED:" in block
    # a live block is replaced in place; the bytes around it are the live ones
    live2 = f"head {PASSWORD_LINE}\n{Region.LEARNED.start}\n- old\n{Region.LEARNED.end}\ntail\n"
    text2 = staged_text(live2, proposed)
    assert text2 == f"head {PASSWORD_LINE}\n" + block + "\ntail\n"
