"""The mock world model and the prompt templates."""

from __future__ import annotations

import json

import pytest

from skillopt.backends.base import Backend, CompletionRequest, Role
from skillopt.backends.mock import DEFAULT_RULES, MockBackend, World, build_mock_member
from skillopt.config import MockMember
from skillopt.errors import ConfigError, RetryableBackendError
from skillopt.prompts import load_prompt, placeholders, render_prompt

WORLD = World()
CITE = WORLD.rule("cite")
TESTS = WORLD.rule("tests")
TERSE = WORLD.rule("terse")
assert CITE and TESTS and TERSE


def _task(*keys: str, intent: str = "do the thing", tid: str = "t1") -> dict[str, object]:
    return {"id": tid, "intent": intent, "tags": [f"rule:{k}" for k in keys]}


def test_attempt_succeeds_iff_every_rule_text_present() -> None:
    task = _task("cite", "tests")
    skill = f"# Skill\n- {CITE.text}\n"
    answer = WORLD.answer(task, skill, "", 0)
    assert WORLD.judge(task, answer)[0] == 0.5
    answer = WORLD.answer(task, skill, f"- {TESTS.text}", 0)
    assert WORLD.judge(task, answer) == (1.0, "every requirement met")


def test_rules_from_intent_triggers_when_untagged() -> None:
    task = {"id": "x", "intent": "Where is the config parsed? Which file?", "tags": []}
    assert [r.key for r in WORLD.required(task)] == ["cite"]


def test_harmful_rule_breaks_other_tasks_but_helps_its_own() -> None:
    other = _task("cite")
    own = _task("terse", tid="t2")
    docs = f"{CITE.text}\n{TERSE.text}"
    assert WORLD.judge(other, WORLD.answer(other, docs, "", 0))[0] == 0.0
    assert WORLD.judge(own, WORLD.answer(own, docs, "", 0))[0] == 1.0


def test_reflect_proposes_missing_rules_plus_harmful_within_budget() -> None:
    failures = [_task("cite", "changelog"), _task("tests", tid="t2")]
    edits = WORLD.proposals(failures, skill="", memory="", target="skill", budget=4)
    assert [e["content"] for e in edits] == [CITE.text, TESTS.text, TERSE.text]
    assert WORLD.proposals(failures, skill="", memory="", target="skill", budget=2) == edits[:2]
    memory = WORLD.proposals(failures, skill="", memory="", target="memory", budget=4)
    assert [e["content"] for e in memory] == [r.text for r in DEFAULT_RULES if r.home == "memory"]
    assert WORLD.proposals([], skill="", memory="", target="skill", budget=4) == []


def test_samples_differ_only_for_nonzero_sample_ids() -> None:
    task = _task("cite", "tests", "commits", tid="spread")
    first = {WORLD.answer(task, "", "", 0) for _ in range(3)}
    assert len(first) == 1
    many = {WORLD.answer(task, "", "", k) for k in range(1, 12)}
    assert len(many) > 1


async def test_backend_protocol_and_stages() -> None:
    backend = build_mock_member(type("Cfg", (), {"name": "m1", "model": "w", "latency": 0.0})())
    assert isinstance(backend, Backend)
    assert backend.name == "m1"
    task = _task("cite")
    req = CompletionRequest(
        role=Role.TARGET,
        prompt="p",
        stage="rollout",
        metadata={"stage": "attempt", "task": task, "skill": CITE.text, "memory": ""},
    )
    done = await backend.complete(req)
    assert CITE.marker in done.text and done.usage.estimated
    judge = CompletionRequest(
        role=Role.OPTIMIZER,
        prompt="j",
        metadata={"stage": "judge", "task": task, "response": done.text},
    )
    assert json.loads((await backend.complete(judge)).text)["score"] == 1.0
    reflect = CompletionRequest(
        role=Role.OPTIMIZER,
        prompt="r",
        metadata={"stage": "reflect", "failures": [task], "target": "skill", "edit_budget": 1},
    )
    assert json.loads((await backend.complete(reflect)).text)[0]["content"] == CITE.text


async def test_fail_stages_raise_retryable() -> None:
    backend = MockBackend(fail_stages=["*"])
    with pytest.raises(RetryableBackendError):
        await backend.complete(CompletionRequest(role=Role.TARGET, prompt="x"))


def test_render_prompt_is_strict() -> None:
    names = placeholders("judge")
    assert {"marker", "intent", "rubric", "response"} <= names
    values = {n: f"<{n}>" for n in names}
    text = render_prompt("judge", **values)
    assert "<rubric>" in text and "{{" not in text
    with pytest.raises(ConfigError, match="missing"):
        render_prompt("judge", **{k: v for k, v in values.items() if k != "rubric"})
    with pytest.raises(ConfigError, match="unused"):
        render_prompt("judge", extra="x", **values)
    with pytest.raises(ConfigError):
        load_prompt("nope")


def test_values_are_not_reexpanded() -> None:
    values = {n: "x" for n in placeholders("attempt")}
    values["intent"] = "{{ skill }}"
    assert "{{ skill }}" in render_prompt("attempt", **values)


@pytest.mark.parametrize("name", ["attempt", "judge", "reflect", "reflect_contrastive"])
def test_every_template_carries_the_marker(name: str) -> None:
    assert "marker" in placeholders(name)


def test_an_unknown_mock_option_is_a_config_error_naming_it() -> None:
    cfg = MockMember(name="m1", options={"latncy": 0.1})
    with pytest.raises(ConfigError) as caught:
        build_mock_member(cfg)
    assert caught.value.key == "members.m1.options.latncy"
    assert build_mock_member(MockMember(name="m2", options={"latency": 0.0})).name == "m2"
