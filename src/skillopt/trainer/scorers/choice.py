"""Multiple choice: options shuffled per sample, the answer letter read from free text.

A model that prefers a position (always "A") must not score by the dataset's habit of
putting the right option first, so each attempt sees the options in a permutation seeded by
``(seed, item id, sample id)``: the same attempt always sees the same order (resume and
byte-identical reruns), other samples and items see other orders. The letter the model
gave is mapped back through the permutation, so results record the *un-shuffled* label.

The letter is read from the reply in order of how explicit it is: an ``<answer>`` tag (its
content), ``\\boxed{C}``, "answer: C" / "the answer is (C)" / "option C", a line that is a
letter alone ("C", "(C)", "**C.**"), a line starting with one ("C) 42"), and last the
answer text equal to one option's text. An article ("A good idea...") is never a letter.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass

from skillopt.trainer.envs.qa import normalize_answer
from skillopt.trainer.scorers.base import Verdict, passed

__all__ = [
    "Presentation",
    "extract_choice",
    "letters_for",
    "present",
    "render_options",
    "score_choice",
]

_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_DECOR = "*_`'\" \t"


def letters_for(count: int) -> str:
    if not 2 <= count <= 26:
        raise ValueError(f"a multiple-choice item needs 2 to 26 options, got {count}")
    return string.ascii_uppercase[:count]


@dataclass(frozen=True, slots=True, kw_only=True)
class Presentation:
    """The options as one attempt sees them: ``order[k]`` is the original index shown at
    letter ``k``."""

    order: tuple[int, ...]
    options: tuple[str, ...]  # in presented order

    @property
    def letters(self) -> str:
        return letters_for(len(self.order))

    def presented_letter(self, original_index: int) -> str:
        return self.letters[self.order.index(original_index)]

    def original_index(self, letter: str) -> int:
        return self.order[self.letters.index(letter)]


def present(
    choices: Sequence[str], *, seed: int, item_id: str, sample_id: int, shuffle: bool = True
) -> Presentation:
    """The seeded permutation of ``choices`` for this attempt (identity when not shuffling).
    String seeds are hashed with SHA-512 by :mod:`random`, so orders are stable across runs."""
    order = list(range(len(choices)))
    letters_for(len(order))
    if shuffle:
        random.Random(f"mcq:{seed}:{item_id}:{sample_id}").shuffle(order)
    return Presentation(order=tuple(order), options=tuple(choices[i] for i in order))


def render_options(presentation: Presentation) -> str:
    return "\n".join(
        f"{letter}) {text}"
        for letter, text in zip(presentation.letters, presentation.options, strict=True)
    )


def _explicit(text: str, letters: str) -> str | None:
    """A letter stated as the answer; the last such statement wins. A lower-case letter
    counts only when punctuation or the line's end follows it ("the answer is a prime" is
    not a choice of A)."""
    lead = (
        r"(?i:\\boxed\{|\b(?:answer|choice|option)\s*(?:is|would be|:|=|-)?\s*[:\-]?)"
        r"\s*[*_`]*\(?\s*"
    )
    upper = rf"{lead}([{letters}])(?![\w’'-])"
    lower = rf"{lead}([{letters.lower()}])(?=\s*(?:[).:*_`}}]|$))"
    found = [
        (match.start(1), match.group(1).upper())
        for pattern in (upper, lower)
        for match in re.finditer(pattern, text, re.MULTILINE)
    ]
    return max(found)[1] if found else None


def _line_letter(line: str, letters: str) -> str | None:
    """``C``, ``(C)``, ``C.``, ``**C**`` alone on a line, or ``C)``/``C.``/``C:`` starting it."""
    bare = line.strip(_DECOR)
    alone = re.fullmatch(rf"\(?([{letters}])\)?[.:]?", bare.strip(_DECOR))
    if alone:
        return alone.group(1)
    lead = re.match(rf"\(?([{letters}])[).:]\s", bare + " ")
    return lead.group(1) if lead else None


def extract_choice(reply: str, letters: str, options: Sequence[str] = ()) -> str | None:
    """The presented letter the reply chose (upper case), or None when it chose none."""
    tags = _TAG.findall(reply)
    text = str(tags[-1]) if tags else reply
    if tags:  # a tag holding a letter alone, in either case
        alone = re.fullmatch(rf"\(?([{letters}])\)?[.:]?", text.strip(_DECOR), re.IGNORECASE)
        if alone:
            return alone.group(1).upper()
    explicit = _explicit(text, letters)
    if explicit is not None:
        return explicit
    lines = [line for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        letter = _line_letter(line, letters)
        if letter is not None:
            return letter
    wanted = normalize_answer(lines[-1]) if lines else ""
    for letter, option in zip(letters, options, strict=False):
        if wanted and wanted == normalize_answer(option):
            return letter
    return None


def score_choice(reply: str, presentation: Presentation, answer_index: int) -> Verdict:
    """Pass when the chosen letter is the gold option's letter in this presentation. The
    extras record the presented and the un-shuffled (original) labels."""
    letters = presentation.letters
    gold = presentation.presented_letter(answer_index)
    chosen = extract_choice(reply, letters, presentation.options)
    original = "" if chosen is None else letters[presentation.original_index(chosen)]
    extras = {
        "order": list(presentation.order),
        "chosen": chosen or "",
        "chosen_original": original,
        "gold_original": letters[answer_index],
    }
    hit = 1.0 if chosen == gold else 0.0
    if chosen is None:
        failure = f"no_choice: no option letter ({letters}) found in the reply"
    else:
        picked = presentation.options[letters.index(chosen)]
        failure = f"wrong_choice: chose {chosen} ({picked!r}), expected {gold}"
    return passed(
        hit,
        hit,
        failure=failure,
        check=f"chose {chosen or '-'} (original {original or '-'}), gold {gold} "
        f"(original {letters[answer_index]})",
        extras=extras,
    )
