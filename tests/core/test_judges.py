"""Judges: every rule op, validation at load time, exact/answer/rubric judges."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skillopt.errors import DataError
from skillopt.judges import (
    KNOWN_OPS,
    is_shape_only,
    judge_answer,
    judge_exact,
    judge_local,
    rubric_keyword_fallback,
    rubric_result,
    score_rule_checks,
    validate_checks,
)
from skillopt.types import ReferenceKind, RuleCheck, TaskRecord


def rc(op: str, arg: str | int = "") -> RuleCheck:
    return RuleCheck(op=op, arg=arg)


# (op, arg, response, tools, passes)
OP_CASES = [
    ("max_chars", 5, "12345", (), True),
    ("max_chars", 5, "123456", (), False),
    ("max_chars", "5", "1234", (), True),
    ("min_chars", 3, "abc", (), True),
    ("min_chars", 3, "ab", (), False),
    ("contains", "Foo", "a foo b", (), True),
    ("contains", "foo", "a fo b", (), False),
    ("not_contains", "TODO", "all done", (), True),
    ("not_contains", "todo", "a TODO left", (), False),
    ("regex", r"^\d{3}$", "123", (), True),
    ("regex", r"^\d{3}$", "12a", (), False),
    ("regex", r"(?m)^- ", "x\n- item", (), True),
    # section_present: heading ending with the name, bold line, or label
    ("section_present", "Summary", "## Summary\ntext", (), True),
    ("section_present", "Summary", "# Final summary  \ntext", (), True),
    ("section_present", "Summary", "## Summary of changes\n", (), False),
    ("section_present", "Summary", "**Summary**\n", (), True),
    ("section_present", "Summary", "**Summary**:\n", (), True),
    ("section_present", "Summary", "Summary: all good", (), True),
    ("section_present", "Summary", "the summary is here", (), False),
    ("section_present", "Summary", "    # Summary", (), False),
    # section_contains: ATX headings only, NAME anywhere in the heading
    ("section_contains", "Summary", "## Summary of changes\n", (), True),
    ("section_contains", "summary", "### SUMMARY\n", (), True),
    ("section_contains", "Summary", "**Summary**\n", (), False),
    ("section_contains", "Summary", "Summary: x\n", (), False),
    ("section_contains", "Summary", "#Summary\n", (), False),
    ("section_contains", "Summary", "    ## Summary\n", (), False),
    ("section_contains", "Summary", "####### Summary\n", (), False),
    # no_refusal
    ("no_refusal", "", "Here is the fix.", (), True),
    ("no_refusal", "", "", (), False),
    ("no_refusal", "", "   \n", (), False),
    ("no_refusal", "", "I can't help with that.", (), False),
    ("no_refusal", "", "> 1. I\u2019m unable to do this", (), False),
    ("no_refusal", "", "Sorry, I cannot comply.", (), False),
    ("no_refusal", "", "I cannot" + " really" * 120, (), True),  # long answers are not refusals
    ("no_refusal", "", "The tool says I cannot write there, so I used /tmp.", (), True),
    # tool_called: only the recorded list counts, not a self-reported marker
    ("tool_called", "search", "done", ("Search",), True),
    ("tool_called", "search", "TOOL_CALL: search", (), False),
    ("tool_called", "search", "done", ("read",), False),
]


@pytest.mark.parametrize(("op", "arg", "response", "tools", "passes"), OP_CASES)
def test_each_op(
    op: str, arg: str | int, response: str, tools: tuple[str, ...], passes: bool
) -> None:
    result = score_rule_checks([rc(op, arg)], response, tools)
    assert result.hard == (1.0 if passes else 0.0)
    assert result.soft == result.hard
    assert (result.failed == ()) is passes
    if not passes:
        assert result.failed == (f"{op}={arg}",)
        assert result.reason == f"failed: {op}={arg}"


def test_every_known_op_has_a_case() -> None:
    assert {case[0] for case in OP_CASES} == set(KNOWN_OPS)


def test_all_pass_for_hard_and_fraction_for_soft() -> None:
    checks = [rc("contains", "a"), rc("contains", "b"), rc("max_chars", 2), rc("min_chars", 1)]
    result = score_rule_checks(checks, "abc")
    assert result.hard == 0.0
    assert result.soft == 0.75
    assert result.failed == ("max_chars=2",)
    ok = score_rule_checks(checks[:2], "abc")
    assert (ok.hard, ok.soft, ok.reason) == (1.0, 1.0, "all checks passed")


def test_no_checks_scores_zero() -> None:
    assert score_rule_checks([], "x").reason == "no checks"
    assert score_rule_checks([], "x").hard == 0.0


def test_broken_checks_fail_with_annotation() -> None:
    result = score_rule_checks([rc("regex", "("), rc("wibble", "x"), rc("max_chars", -1)], "x")
    assert result.failed == (
        "regex=( [invalid regex]",
        "wibble=x [unknown op]",
        "max_chars=-1 [invalid bound]",
    )
    assert result.hard == 0.0 and result.soft == 0.0


@pytest.mark.parametrize(
    "checks",
    [
        [rc("wibble", "x")],
        [rc("regex", "(")],
        [rc("regex", "(a+)+$")],
        [rc("regex", r"^(\w*\s)*x")],
        [rc("regex", "(x+){2,}")],
        [rc("contains", "")],
        [rc("contains", 5)],
        [rc("max_chars", -1)],
        [rc("max_chars", "ten")],
        [rc("min_chars", "")],
        [rc("contains", "x"), rc("tool_called", "   ")],
    ],
)
def test_validate_checks_errors(checks: list[RuleCheck]) -> None:
    with pytest.raises(DataError):
        validate_checks(checks)


def test_validate_checks_warnings() -> None:
    assert validate_checks([rc("contains", "x")]) == ()
    assert validate_checks([rc("regex", r"(\d+\.)?\d+"), rc("regex", "(ab)+")]) == ()
    warnings = validate_checks([rc("min_chars", 0)])
    assert any("min_chars=0" in w for w in warnings)
    assert any("shape" in w for w in warnings)
    assert validate_checks([]) == ()


def test_is_shape_only() -> None:
    assert is_shape_only([rc("max_chars", 3), rc("section_present", "A")])
    assert not is_shape_only([rc("max_chars", 3), rc("contains", "A")])


@pytest.mark.parametrize(
    ("reference", "response", "hard", "soft"),
    [
        ("Paris", "The capital is paris.", 1.0, 1.0),
        ("New-York City", "it is new york city!", 1.0, 1.0),
        ("cat", "concatenate", 0.0, 0.0),
        ("red green blue", "red and blue", 0.0, 2 / 3),
        ("", "anything", 0.0, 0.0),
    ],
)
def test_judge_exact(reference: str, response: str, hard: float, soft: float) -> None:
    result = judge_exact(reference, response)
    assert result.hard == hard
    assert math.isclose(result.soft, soft)
    assert bool(result.failed) is (hard == 0.0)


@pytest.mark.parametrize(
    ("reference", "response", "hard"),
    [
        ("42", "<answer>42</answer>", 1.0),
        ("42", "work...\nAnswer: 42", 1.0),
        ("42", "<answer>41</answer> 42", 0.0),
        ("Barack Obama", "Final answer: barack obama.", 1.0),
        ("Obama || Barack Obama", "answer: Obama", 1.0),
        ("Paris", "London", 0.0),
        ("", "x", 0.0),
    ],
)
def test_judge_answer(reference: str, response: str, hard: float) -> None:
    assert judge_answer(reference, response).hard == hard


def test_judge_answer_soft_is_token_f1() -> None:
    result = judge_answer("barack hussein obama", "Answer: barack obama")
    assert result.hard == 0.0
    assert math.isclose(result.soft, 0.8)


def test_rubric_keyword_fallback() -> None:
    rubric = "mentions latency, throughput and errors"
    full = rubric_keyword_fallback(rubric, "latency throughput errors mentions")
    assert full.hard == 1.0 and full.soft == 1.0
    part = rubric_keyword_fallback(rubric, "latency only")
    assert part.hard == 0.0 and part.soft == 0.25
    assert "keyword=errors" in part.failed
    assert rubric_keyword_fallback("a an", "x").hard == 0.0


@pytest.mark.parametrize(
    ("score", "hard", "soft"), [(0.8, 1.0, 0.8), (0.79, 0.0, 0.79), (1.5, 1.0, 1.0), (-1, 0.0, 0.0)]
)
def test_rubric_result(score: float, hard: float, soft: float) -> None:
    result = rubric_result(score, "why")
    assert (result.hard, result.soft, result.reason) == (hard, soft, "why")


@pytest.mark.parametrize("bad", [math.nan, math.inf, True, "0.9"])
def test_rubric_result_rejects_non_numbers(bad: object) -> None:
    with pytest.raises(DataError):
        rubric_result(bad)  # type: ignore[arg-type]


def test_judge_local_dispatch() -> None:
    rule = TaskRecord(
        id="r", intent="i", reference_kind=ReferenceKind.RULE, checks=(rc("contains", "ok"),)
    )
    exact = TaskRecord(id="e", intent="i", reference_kind=ReferenceKind.EXACT, reference="ok")
    answer = TaskRecord(id="a", intent="i", reference_kind=ReferenceKind.ANSWER, reference="ok")
    rubric = TaskRecord(id="b", intent="i", reference_kind=ReferenceKind.RUBRIC, reference="ok")
    tool = TaskRecord(
        id="t", intent="i", reference_kind=ReferenceKind.RULE, checks=(rc("tool_called", "grep"),)
    )
    assert judge_local(rule, "ok") is not None and judge_local(rule, "ok").hard == 1.0  # type: ignore[union-attr]
    assert judge_local(exact, "it is ok").hard == 1.0  # type: ignore[union-attr]
    assert judge_local(answer, "Answer: ok").hard == 1.0  # type: ignore[union-attr]
    assert judge_local(rubric, "ok") is None
    assert judge_local(tool, "x", ("grep",)).hard == 1.0  # type: ignore[union-attr]


@given(
    flags=st.lists(st.booleans(), min_size=1, max_size=8),
)
def test_soft_is_passing_fraction_property(flags: list[bool]) -> None:
    checks = [rc("contains", "yes") if f else rc("contains", "nope") for f in flags]
    result = score_rule_checks(checks, "yes")
    assert math.isclose(result.soft, sum(flags) / len(flags))
    assert result.hard == (1.0 if all(flags) else 0.0)
    assert len(result.failed) == flags.count(False)
