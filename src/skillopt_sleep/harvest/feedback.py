"""Detect the user's reaction to the previous answer in a follow-up message.

Better than substring matching on a word list in four ways:
- only follow-up messages count (the opening request is the task, not a verdict);
- code blocks, inline code and quoted lines are removed first, so a pasted log that says
  "wrong type" or "error" is not read as a complaint;
- only the head of the message is read (a verdict comes first; a long message that
  mentions "great" in paragraph four is a new request);
- phrases are matched as whole words, and a positive cue under negation ("not perfect",
  "no longer works") is not positive.
"""

from __future__ import annotations

import re

from skillopt_sleep.harvest.digest import FeedbackSignal, Sentiment

__all__ = ["HEAD_CHARS", "detect_feedback", "visible_head"]

HEAD_CHARS = 280

_FENCED = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_INLINE = re.compile(r"`[^`\n]*`")
_QUOTED = re.compile(r"^\s*>.*$", re.MULTILINE)

_NEGATION_BEFORE = re.compile(r"(?:\bnot|n't|\bnever|\bno longer|\bhardly)\W+(?:\w+\W+)?$", re.I)

_NEGATIVE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("no", re.compile(r"^\W*(?:no|nope|nah)\b(?!\s+(?:problem|worries|need)\b)", re.I)),
    (
        "still_broken",
        re.compile(
            r"\b(?:still|again)\s+(?:broken|failing|fails|wrong|crash(?:es|ing)?|"
            r"not\s+working|doesn'?t\s+work|the\s+same\s+(?:error|problem|issue))\b",
            re.I,
        ),
    ),
    (
        "not_working",
        re.compile(
            r"\b(?:doesn'?t|does\s+not|didn'?t|did\s+not|isn'?t|is\s+not|won'?t|no\s+longer)"
            r"\s+(?:work|works|working|compile|build|run|pass|fix|help)\b",
            re.I,
        ),
    ),
    (
        "wrong",
        re.compile(
            r"\b(?:that'?s|this\s+is|it'?s|that\s+is|it\s+is|you'?re|you\s+are|answer\s+is)"
            r"\s+(?:wrong|incorrect|not\s+(?:right|correct))\b",
            re.I,
        ),
    ),
    ("not_asked", re.compile(r"\bnot\s+what\s+i\s+(?:asked|wanted|meant|said)\b", re.I)),
    (
        "revert",
        re.compile(r"\b(?:revert|undo|roll\s*back)\s+(?:that|this|it|the|your|those)\b", re.I),
    ),
    ("broke", re.compile(r"\byou\s+(?:broke|forgot|missed|ignored|deleted|removed)\b", re.I)),
    ("why_did_you", re.compile(r"\bwhy\s+did\s+you\b", re.I)),
)

_POSITIVE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("thanks", re.compile(r"\b(?:thanks|thank\s+you|thx|ty)\b", re.I)),
    ("praise", re.compile(r"\b(?:perfect|excellent|awesome|brilliant)\b", re.I)),
    (
        "praise",
        re.compile(r"^\W*(?:great|nice|good|cool|ok(?:ay)?)\b\W*(?:$|[!.,]|job|work)", re.I),
    ),
    (
        "works",
        re.compile(
            r"\b(?:(?:it|that|this)\s+(?:works|worked|did\s+it|fixed\s+it)|"
            r"works\s+(?:now|great|fine|perfectly)|all\s+(?:tests\s+)?(?:pass|green))\b",
            re.I,
        ),
    ),
    ("approve", re.compile(r"\b(?:lgtm|looks\s+good|ship\s+it)\b", re.I)),
)


# Per cue, words one of which every match contains: a message with none of them skips
# that cue's (slow, case-insensitive) search. Compared against the head case-folded, with
# the dotless i folded and the dot of a dotted capital I dropped (the only letters
# re.IGNORECASE matches to an ASCII one that casefold does not fold to exactly it).
_NEEDS: dict[str, tuple[str, ...]] = {
    "still_broken": ("still", "again"),
    "not_working": ("work", "compile", "build", "run", "pass", "fix", "help"),
    "wrong": ("wrong", "correct", "right"),
    "not_asked": ("what",),
    "revert": ("revert", "undo", "roll"),
    "broke": ("broke", "forgot", "missed", "ignored", "deleted", "removed"),
    "why_did_you": ("why",),
    "thanks": ("thank", "thx", "ty"),
    "works": ("work", "did", "fixed", "pass", "green"),
    "approve": ("lgtm", "good", "ship"),
    "praise": ("perfect", "excellent", "awesome", "brilliant"),  # the unanchored one
}


def _may_match(cue: str, pattern: re.Pattern[str], folded: str) -> bool:
    if pattern.pattern.startswith("^"):
        return True  # anchored: already cheap
    needs = _NEEDS.get(cue)
    return needs is None or any(word in folded for word in needs)


def visible_head(message: str, limit: int = HEAD_CHARS) -> str:
    """The user's own words at the start of ``message``: no code, no quoted text."""
    text = _FENCED.sub(" ", message)
    text = _INLINE.sub(" ", text)
    text = _QUOTED.sub(" ", text)
    return text.strip()[:limit]


def _negated(text: str, start: int) -> bool:
    return bool(_NEGATION_BEFORE.search(text[max(0, start - 30) : start]))


def detect_feedback(message: str, turn: int) -> tuple[FeedbackSignal, ...]:
    """Signals in one user message; empty for the opening message (``turn == 0``)."""
    if turn <= 0:
        return ()
    head = visible_head(message)
    if not head:
        return ()
    folded = head.casefold().replace("\u0131", "i").replace("\u0307", "")
    found: list[FeedbackSignal] = []
    seen: set[str] = set()
    for cue, pattern in _NEGATIVE:
        if cue not in seen and _may_match(cue, pattern, folded) and pattern.search(head):
            seen.add(cue)
            found.append(FeedbackSignal(sentiment=Sentiment.NEGATIVE, cue=cue, turn=turn))
    for cue, pattern in _POSITIVE:
        if cue in seen or not _may_match(cue, pattern, folded):
            continue
        match = pattern.search(head)
        if match and not _negated(head, match.start()):
            seen.add(cue)
            found.append(FeedbackSignal(sentiment=Sentiment.POSITIVE, cue=cue, turn=turn))
    return tuple(found)
