"""The trainer's scorers as pure functions: one table per scorer."""

from __future__ import annotations

import pytest

from skillopt.errors import ConfigError, DataError
from skillopt.trainer.scorers.base import ScoreContext
from skillopt.trainer.scorers.choice import extract_choice, present, score_choice
from skillopt.trainer.scorers.numeric import parse_number, score_numeric
from skillopt.trainer.scorers.pattern import RegexScorer, compile_pattern, score_regex
from skillopt.trainer.scorers.registry import build_scorer, scorer_settings
from skillopt.trainer.scorers.text import golds_of, score_em, score_exact, score_f1


@pytest.mark.parametrize(
    ("prediction", "golds", "hard"),
    [
        ("Paris", ["Paris"], 1.0),
        ("  Paris\n", ["Paris"], 1.0),
        ("paris", ["Paris"], 0.0),  # exact means as written
        ("The Paris", ["Paris"], 0.0),
        ("Lyon", ["Paris", "Lyon"], 1.0),
    ],
)
def test_exact(prediction: str, golds: list[str], hard: float) -> None:
    assert score_exact(prediction, golds).hard == hard


@pytest.mark.parametrize(
    ("prediction", "golds", "hard", "soft"),
    [
        ("The Paris.", ["paris"], 1.0, 1.0),
        ("Ada Kovac", ["Ada Kovac"], 1.0, 1.0),
        ("Kovac", ["Ada Kovac"], 0.0, pytest.approx(2 / 3)),
        ("nothing", ["Ada Kovac"], 0.0, 0.0),
    ],
)
def test_em_with_f1_as_soft(prediction: str, golds: list[str], hard: float, soft: float) -> None:
    verdict = score_em(prediction, golds)
    assert (verdict.hard, verdict.soft) == (hard, soft)
    assert (verdict.reason == "") == (hard == 1.0)


@pytest.mark.parametrize(
    ("prediction", "threshold", "hard"),
    [("Ada Kovac", 0.5, 1.0), ("Kovac", 0.5, 1.0), ("Kovac", 0.9, 0.0), ("Bruno", 0.5, 0.0)],
)
def test_f1_passes_at_its_threshold(prediction: str, threshold: float, hard: float) -> None:
    assert score_f1(prediction, ["Ada Kovac"], threshold=threshold).hard == hard


@pytest.mark.parametrize(
    ("item", "golds"),
    [({"answers": ["a", "b"]}, ["a", "b"]), ({"answer": 42}, ["42"]), ({"answer": "x"}, ["x"])],
)
def test_golds_from_answers_or_answer(item: dict[str, object], golds: list[str]) -> None:
    assert golds_of(item) == golds


def test_an_item_without_golds_is_a_data_error() -> None:
    with pytest.raises(DataError, match="'answers'"):
        golds_of({"id": "q1", "answers": []})


# --------------------------------------------------------------------------- numeric


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("42", 42.0),
        ("The total is 1,234,567.", 1234567.0),
        ("1 234 567 people", 1234567.0),
        ("$1,250.50", 1250.5),
        ("about 12 kg", 12.0),
        ("12%", 12.0),
        ("\u22123.5", -3.5),
        ("-0.25", -0.25),
        ("3/4", 0.75),
        ("6.02e23", 6.02e23),
        ("first 3 then 7", 7.0),  # the last number counts
        ("x = 5, so the answer is 10", 10.0),
        ("no number here", None),
        ("1/0", None),
    ],
)
def test_parse_number(text: str, value: float | None) -> None:
    assert parse_number(text) == (pytest.approx(value) if value is not None else None)


@pytest.mark.parametrize(
    ("prediction", "gold", "abs_tol", "rel_tol", "hard"),
    [
        ("3.14159", "3.14159", 0.0, 1e-6, 1.0),
        ("3.14", "3.14159", 0.01, 0.0, 1.0),
        ("3.14", "3.14159", 0.001, 0.0, 0.0),
        ("1,020", "1000", 0.0, 0.05, 1.0),  # 2% off, 5% allowed
        ("1,100", "1000", 0.0, 0.05, 0.0),
        ("roughly 1000 metres", "1 000", 0.0, 0.0, 1.0),
        ("none", "1000", 1.0, 1.0, 0.0),
    ],
)
def test_numeric_tolerance(
    prediction: str, gold: str, abs_tol: float, rel_tol: float, hard: float
) -> None:
    verdict = score_numeric(prediction, [gold], abs_tol=abs_tol, rel_tol=rel_tol)
    assert verdict.hard == hard
    assert 0.0 <= verdict.soft <= 1.0
    if not hard:
        assert verdict.reason.split(":")[0] in {"out_of_tolerance", "no_number"}


def test_numeric_soft_falls_off_with_the_error() -> None:
    near = score_numeric("110", ["100"], abs_tol=0, rel_tol=0).soft
    far = score_numeric("150", ["100"], abs_tol=0, rel_tol=0).soft
    assert near == pytest.approx(0.9) and far == pytest.approx(0.5)


# --------------------------------------------------------------------------- regex


@pytest.mark.parametrize(
    ("answer", "pattern", "search", "hard"),
    [
        ("2024-01-05", r"\d{4}-\d{2}-\d{2}", False, 1.0),
        ("on 2024-01-05", r"\d{4}-\d{2}-\d{2}", False, 0.0),
        ("on 2024-01-05", r"\d{4}-\d{2}-\d{2}", True, 1.0),
        ("YES", r"yes", False, 1.0),  # case-insensitive by default
    ],
)
def test_regex(answer: str, pattern: str, search: bool, hard: float) -> None:
    compiled = compile_pattern(pattern, ignore_case=True, where="test")
    assert score_regex(answer, compiled, search=search).hard == hard


async def test_regex_pattern_comes_from_the_item_and_a_bad_one_is_named() -> None:
    scorer = RegexScorer(pattern="no")
    verdict = await scorer.score("<answer>yes</answer>", {"id": "a", "pattern": "y.s"},
                                 ScoreContext())  # fmt: skip
    assert verdict.hard == 1.0
    with pytest.raises(DataError, match=r"item 'b' field 'pattern'.*invalid"):
        await scorer.score("x", {"id": "b", "pattern": "(unclosed"}, ScoreContext())


# --------------------------------------------------------------------------- choice

LETTERS = "ABCD"
OPTIONS = ["1", "2", "3", "42"]


@pytest.mark.parametrize(
    ("reply", "letter"),
    [
        ("<answer>C</answer>", "C"),
        ("Let me think.\n<answer> (b) </answer>", "B"),
        ("The answer is B because the group is cyclic.", "B"),
        ("the answer is a prime number", None),  # an article, not a choice
        ("A good idea is to check each option.\nC", "C"),
        ("Answer: (c)", "C"),
        ("answer: b.", "B"),
        ("Final answer: **D**", "D"),
        ("\\boxed{D}", "D"),
        ("**B.**", "B"),
        ("C) 42", "C"),
        ("Option A is wrong; option C is right", "C"),  # the last statement wins
        ("I think 42", None),
        ("42", "D"),  # the text of an option
        ("E", None),  # not an option here
        ("", None),
    ],
)
def test_extract_choice(reply: str, letter: str | None) -> None:
    assert extract_choice(reply, LETTERS, OPTIONS) == letter


def test_permutation_is_seeded_per_sample_and_stable() -> None:
    first = present(OPTIONS, seed=7, item_id="q1", sample_id=0)
    assert present(OPTIONS, seed=7, item_id="q1", sample_id=0) == first
    orders = {present(OPTIONS, seed=7, item_id="q1", sample_id=s).order for s in range(20)}
    assert len(orders) > 5  # other samples see other orders
    assert sorted(first.order) == [0, 1, 2, 3]
    assert present(OPTIONS, seed=7, item_id="q1", sample_id=0, shuffle=False).order == (0, 1, 2, 3)


def test_score_choice_records_the_unshuffled_label() -> None:
    shown = present(OPTIONS, seed=1, item_id="q9", sample_id=0)
    gold = 3  # "42", letter D in the file
    letter = shown.presented_letter(gold)
    right = score_choice(f"<answer>{letter}</answer>", shown, gold)
    assert right.hard == 1.0 and right.reason == ""
    assert right.extras["chosen_original"] == "D" and right.extras["gold_original"] == "D"
    wrong_letter = next(c for c in LETTERS if c != letter)
    wrong = score_choice(wrong_letter, shown, gold)
    assert wrong.hard == 0.0 and wrong.reason.startswith("wrong_choice:")
    assert wrong.extras["chosen_original"] == LETTERS[shown.original_index(wrong_letter)]
    assert score_choice("no idea", shown, gold).reason.startswith("no_choice:")


# --------------------------------------------------------------------------- registry


def test_the_config_names_the_scorer_and_checks_its_settings() -> None:
    assert build_scorer(scorer_settings({}, default="em")).name == "em"
    numeric = scorer_settings({"scorer": {"kind": "numeric", "abs_tol": 0.5}}, default="em")
    assert build_scorer(numeric).name == "numeric" and numeric.abs_tol == 0.5
    with pytest.raises(ConfigError, match=r"env\.options\.scorer: abs_tl: unknown key"):
        scorer_settings({"scorer": {"kind": "numeric", "abs_tl": 0.5}}, default="em")
    with pytest.raises(ConfigError, match="kind"):
        scorer_settings({"scorer": "bogus"}, default="em")
