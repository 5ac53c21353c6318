"""Heuristic miner: evidence -> checks/rubrics, merging repeats, stable ids, outcomes."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from skillopt.types import ReferenceKind, RuleCheck, TaskOutcome
from skillopt_sleep.harvest import FeedbackSignal, Sentiment, SessionDigest, SourceKind
from skillopt_sleep.mining.heuristic import (
    JSON_REGEX,
    extract_checks,
    heuristic_mine,
    normalise_intent,
    session_outcome,
    stable_id,
)

T = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)


def _digest(
    sid: str,
    *intents: str,
    feedback: tuple[tuple[Sentiment, str], ...] = (),
    skills: tuple[str, ...] = (),
    turns: int | None = None,
) -> SessionDigest:
    return SessionDigest(
        source=SourceKind.CLAUDE_CODE,
        session_id=sid,
        path=Path(f"/t/{sid}.jsonl"),
        cwd=Path("/work/proj"),
        started_at=T,
        ended_at=T,
        user_intents=intents,
        assistant_finals=("ok",),
        tools_used=("Bash", "Read"),
        skills_used=skills,
        feedback=tuple(FeedbackSignal(sentiment=s, cue=c, turn=1) for s, c in feedback),
        git_branch="main",
        n_user_turns=len(intents) if turns is None else turns,
    )


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        (["Summarise this in under 300 characters"], [RuleCheck(op="max_chars", arg=300)]),
        (["keep it under 50 words", "no, at most 40 words"], [RuleCheck(op="max_chars", arg=280)]),
        (["Don't use `print` in library code"], [RuleCheck(op="not_contains", arg="print")]),
        (["always include `Fixes #` in the message"], [RuleCheck(op="contains", arg="Fixes #")]),
        (["please add a Risks section"], [RuleCheck(op="section_contains", arg="Risks")]),
        (["Add a Test Plan Section."], [RuleCheck(op="section_contains", arg="Test Plan")]),
        (["add a section about risks"], []),
        (["include a `## Test plan` heading"], [RuleCheck(op="section_contains", arg="Test plan")]),
        (["Return the result as JSON"], [RuleCheck(op="regex", arg=JSON_REGEX)]),
        (["Refactor the parser for speed"], []),
        (["what is wrong with the loader?"], []),
        (["no more than 9999999 characters"], []),
    ],
)
def test_extract_checks(texts: list[str], expected: list[RuleCheck]) -> None:
    assert list(extract_checks(texts)) == expected


def test_json_regex_matches_json_answers() -> None:
    assert re.search(JSON_REGEX, '  {"a": 1}')
    assert re.search(JSON_REGEX, "```json\n[1]\n```")
    assert not re.search(JSON_REGEX, "Here is the JSON: {}")


@pytest.mark.parametrize(
    ("feedback", "turns", "outcome"),
    [
        (((Sentiment.POSITIVE, "thanks"),), 2, TaskOutcome.SUCCESS),
        (((Sentiment.NEGATIVE, "wrong"),), 2, TaskOutcome.FAIL),
        (((Sentiment.NEGATIVE, "wrong"), (Sentiment.POSITIVE, "works")), 3, TaskOutcome.MIXED),
        ((), 1, TaskOutcome.UNKNOWN),
        ((), 4, TaskOutcome.MIXED),
    ],
)
def test_session_outcome(
    feedback: tuple[tuple[Sentiment, str], ...], turns: int, outcome: TaskOutcome
) -> None:
    digest = _digest("s", "Do the thing please", feedback=feedback, turns=turns)
    assert session_outcome(digest) is outcome


def test_repeated_requests_merge_into_one_ranked_task() -> None:
    digests = [
        _digest("a", "Write the release notes for this week"),
        _digest(
            "b", "Summarise the CHANGELOG in five bullets", feedback=((Sentiment.NEGATIVE, "no"),)
        ),
        _digest(
            "c",
            "summarise the changelog in five bullets!",
            feedback=((Sentiment.POSITIVE, "thanks"),),
        ),
        _digest("d", "Summarise  the changelog, in five bullets"),
    ]
    result = heuristic_mine(digests, project="/work/proj")
    first, second = result.tasks
    assert first.source_sessions == ("b", "c", "d")
    assert first.outcome is TaskOutcome.SUCCESS  # best observed outcome
    assert first.intent == "Summarise the CHANGELOG in five bullets"
    assert re.fullmatch(r"h_[0-9a-f]{12}", first.id)
    assert first.id == stable_id("h", "SUMMARISE the changelog in five bullets")
    assert second.source_sessions == ("a",)
    assert result.diagnostics["merged_duplicates"] == 2
    assert result.miner == "heuristic"


def test_ids_are_stable_and_survive_a_moved_project() -> None:
    one = heuristic_mine([_digest("a", "Rename the config loader")], project="/p1").tasks[0]
    again = heuristic_mine([_digest("z", "rename the config loader.")], project="/p1").tasks[0]
    moved = heuristic_mine([_digest("a", "Rename the config loader")], project="/p2").tasks[0]
    different = heuristic_mine([_digest("a", "Rename the config parser")], project="/p1").tasks[0]
    assert one.id == again.id == moved.id != different.id
    assert (one.project, moved.project) == ("/p1", "/p2")


def test_followups_become_rubric_and_checks() -> None:
    digest = _digest(
        "s",
        "Draft the PR description for the auth change",
        "no, keep it under 400 characters",
        "and don't mention `JIRA`",
        feedback=((Sentiment.NEGATIVE, "no"),),
    )
    (task,) = heuristic_mine([digest]).tasks
    assert task.reference_kind is ReferenceKind.RULE
    assert set(task.checks) == {
        RuleCheck(op="max_chars", arg=400),
        RuleCheck(op="not_contains", arg="JIRA"),
    }
    assert "under 400 characters" in task.reference
    assert task.context.startswith("Follow-up constraints")
    assert "tools:Bash+Read" in task.tags and "branch:main" in task.tags
    assert task.outcome is TaskOutcome.FAIL


def test_plain_request_is_a_rubric_task_judged_on_the_intent() -> None:
    (task,) = heuristic_mine([_digest("s", "Explain the retry policy module")]).tasks
    assert task.reference_kind is ReferenceKind.RUBRIC
    assert task.reference == "" and task.checks == ()


def test_a_greeting_before_the_request_is_skipped() -> None:
    (task,) = heuristic_mine([_digest("s", "hi", "Fix the flaky login test", "thanks")]).tasks
    assert task.intent == "Fix the flaky login test"
    assert task.context.endswith("thanks")


def test_short_and_empty_requests_are_skipped() -> None:
    result = heuristic_mine([_digest("s", "fix it"), _digest("t", "Make the build green again")])
    assert [t.intent for t in result.tasks] == ["Make the build green again"]
    assert result.diagnostics["skipped_no_request"] == 1


def test_skill_hint_kept_only_when_all_observations_agree() -> None:
    same = heuristic_mine(
        [
            _digest("a", "Fill the PDF form", skills=("pdf",)),
            _digest("b", "fill the pdf form", skills=("pdf",)),
        ]
    ).tasks[0]
    mixed = heuristic_mine(
        [_digest("a", "Fill the PDF form", skills=("pdf",)), _digest("b", "fill the pdf form")]
    ).tasks[0]
    assert same.skill_hint == "pdf" and mixed.skill_hint == ""


def test_max_tasks_truncates_after_ranking() -> None:
    digests = [_digest(f"s{i}", f"Distinct request number {i}") for i in range(5)]
    digests.append(_digest("again", "distinct request number 3"))
    result = heuristic_mine(digests, max_tasks=2)
    assert [t.intent for t in result.tasks] == [
        "Distinct request number 3",
        "Distinct request number 0",
    ]
    assert result.diagnostics["truncated"] == 3


def test_intents_are_redacted_and_clipped() -> None:
    key = "sk-proj-" + "a1B2" * 10
    (task,) = heuristic_mine([_digest("s", f"Call the API with {key} " + "x" * 2000)]).tasks
    assert key not in task.intent and len(task.intent) <= 800


def test_normalise_intent() -> None:
    assert normalise_intent("  Fix   the BUG, please!! ") == "fix the bug please"
    assert normalise_intent("Ｆｉｘ_it") == "fix it"
