"""Detect the user's reaction to the previous answer in a follow-up message.

Better than substring matching on a word list in four ways:
- only follow-up messages count (the opening request is the task, not a verdict);
- code blocks, inline code and quoted lines are removed first, so a pasted log that says
  "wrong type" or "error" is not read as a complaint;
- only the head of the message is read (a verdict comes first; a long message that
  mentions "great" in paragraph four is a new request);
- phrases are matched as whole words, and a positive cue under negation ("not perfect",
  "no longer works") is not positive;
- a cue that also reads as a question or a request ("what is wrong with the parser?",
  "check why it is missing") does not count when such a word comes just before it.

The negative cues are families of how developers correct an agent, each in several
phrasings: a flat "no"; it still or again fails; it does not work; it is wrong (said of
the answer or of a part of it: "wrong date format again", "the timestamps are wrong");
not what was asked; not how we do it ("that's not our commit style", "this isn't how we
name branches"); too much of something ("too wordy", "way too long"); something is
missing; what the agent did or failed to do ("you forgot", "you didn't", "you should have
used"); "I said" / "I asked for"; stop doing it; not quite; frustration; undo it.

A correction is also read by what it asks for, whatever its first word
(:func:`_asks_otherwise`): the user asks for a different output or behaviour than the one
given. Contrast ("use X instead", "rather than", "X, not Y", "not X but Y", "I meant"); a
prohibition ("please stop with", "don't", "never"); narrowing ("just the ...", "only the
..."); a want ("I need ...", "I'd prefer ...", but not "I want to ...": a plan); a
revision of the answer ("make it ...", "rename it back", "wrap it in ...", "use ..."); a
comparative ("shorter", "less verbose"); what it should be ("that should be a warning",
"needs to be sorted"). All but contrast and prohibition read the start of a clause and
yield to a new request's markers ("now", "next", "also", "as well", "too"): "now make the
error message friendlier" is a new task.
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
# A question or a request about the thing, not a verdict on the answer.
_ASKING_BEFORE = re.compile(
    r"\b(?:what|why|how|where|which|whether|if|unless|check|find\s+out|see|tell\s+me|"
    r"make\s+sure|ensure|verify|confirm)\b"
    r"[^.!?;\n]*$",
    re.I,
)

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
    ("wrong", re.compile(r"^\W*(?:wrong|incorrect|not\s+(?:right|correct))\b", re.I)),
    (
        "wrong",  # said of a part of the answer: "the timestamps are wrong"
        re.compile(
            r"\b(?:is|are|was|were|looks?|seems?)\s+(?:still\s+|all\s+)?(?:wrong|incorrect)\b",
            re.I,
        ),
    ),
    ("not_asked", re.compile(r"\bnot\s+what\s+i\s+(?:asked|wanted|meant|said)\b", re.I)),
    (
        "not_our_way",
        re.compile(
            r"(?:'s\s+not|\b(?:is|are|was|were)(?:\s+not|n'?t))\s+"
            r"(?:(?:our|my)\s+\w+(?!\s+to\b)|how\s+(?:we|i)|what\s+(?:we|i)\s+(?:use|want|do)|"
            r"the\s+(?:\w+\s+){0,2}(?:we|i)\s+(?:use|want|follow))\b",
            re.I,
        ),
    ),
    ("not_our_way", re.compile(r"^\W*not\s+(?:our|my)\s+\w+", re.I)),
    (
        "too_much",
        re.compile(
            r"(?:^\W*|[.!?;]\s*|\b(?:is|are|was|it'?s|that'?s|still|way|far|much|bit|little|"
            r"a\s+lot)\s+)too\s+(?:\w+)",
            re.I,
        ),
    ),
    (
        "missing",
        re.compile(r"\b(?:is|are|'s|'re)\s+(?:still\s+)?missing\b", re.I),
    ),
    (
        "revert",
        re.compile(r"\b(?:revert|undo|roll\s*back)\s+(?:that|this|it|the|your|those)\b", re.I),
    ),
    ("broke", re.compile(r"\byou\s+(?:broke|forgot|missed|ignored|deleted|removed)\b", re.I)),
    (
        "not_done",
        re.compile(
            r"\byou\s+(?:didn'?t|did\s+not|haven'?t|have\s+not|never|still\s+haven'?t)\b"
            r"(?!\s+(?:have\s+to|need\s+to))",
            re.I,
        ),
    ),
    (
        "should_have",
        re.compile(r"\bshould(?:\s+have|'ve)\s+(?:been|\w+ed|used|kept|left|written|done)\b", re.I),
    ),
    (
        "i_said",
        re.compile(
            r"(?<!what )\bi\s+(?:said|told\s+you|asked\s+(?:you\s+)?(?:for|to|not))\b", re.I
        ),
    ),
    ("stop", re.compile(r"^\W*(?:please\s+)?(?:stop|quit)\s+\w+ing\b", re.I)),
    (
        "not_quite",
        re.compile(r"^\W*(?:not\s+(?:quite|really|exactly)|close,?\s+but|almost,?\s+but)\b", re.I),
    ),
    ("frustrated", re.compile(r"^\W*(?:ugh+|argh+|wtf|come\s+on|seriously)\b", re.I)),
    ("why_did_you", re.compile(r"\bwhy\s+did\s+you\b", re.I)),
)
# Clauses, and the small words a user puts before the request itself.
_CLAUSES = re.compile(r"[.!?;:,\n\u2014]")
_OPENER = re.compile(
    r"\W*(?:(?:ok(?:ay)?|hmm+|um+|ah|oh|well|sorry|actually|please|pls)\b\W*)*"
    r"(?:(?:can|could|would|will)\s+you\s+(?:please\s+)?)?",
    re.I,
)
_CONTRAST = re.compile(
    r"\binstead\b|\brather\s+than\b|\bi(?:'d|\s+would)\s+rather\b|\bi\s+meant\b|"
    r",\s*not\s+(?!(?:sure|yet|bad|now|really)\b)\S|\bnot\s+\w+(?:\s+\w+){0,3}\s+but\b",
    re.I,
)
_REVISE_VERBS = (
    r"make|change|turn|convert|rename|rewrite|redo|rework|move|put|wrap|split|swap|keep|"
    r"leave|drop|remove|trim|shorten|simplify|reword|rephrase|reformat|restore|return|fix"
)
# What a clause asks for, read at its start (after the opener); one group per cue.
_ASKS = re.compile(
    r"(?P<dont>(?:don'?t|do\s+not|never|no\s+more|stop\s+(?:with|it|that|doing)|"
    r"quit\s+\w+ing)\b(?!\s+(?:forget|worry|mind)\b))"
    r"|(?P<only>(?:just|only)\b(?!\s+(?:now|curious|wondering)\b))"
    r"|(?P<wants>i(?:\s+(?:need|want|wanted|prefer)|(?:'d|\s+would)\s+(?:prefer|like|want))\b(?!\s+to\b))"
    rf"|(?P<revise>(?:(?:{_REVISE_VERBS})\s+(?:it|that|this|them|those|these|the|back)\b|"
    r"use\s+\S)(?!\s+(?:on|going|up)\b))"
    r"|(?P<comparative>(?:much\s+|a\s+bit\s+|way\s+|far\s+)?(?:shorter|simpler|smaller|"
    r"cleaner|tighter|briefer|less\s+\w+|fewer\s+\w+|more\s+(?:concise|compact|"
    r"direct|readable|specific|formal|casual))\b)"
    r"|(?P<should_be>(?:(?:it|that|this|these|those|they)\s+)?(?:should|must|needs?\s+to|"
    r"has\s+to|have\s+to)\s+(?:be|return|go|stay|use|say|read)\b)",
    re.I,
)
# A new request, not a revision of the answer: it says it is the next thing.
_NEW_REQUEST = re.compile(
    r"^\W*(?:(?:ok(?:ay)?|great|thanks|thank\s+you|cool|nice|good|perfect|alright)\b\W*)*"
    r"(?:now|next|then|also|and|let'?s|additionally)\b|"
    r"\b(?:also|as\s+well|another|additionally)\b|\btoo\s*(?:[.!?]|$)",
    re.I,
)
# Asks a new request may share; contrast and prohibition are never new requests.
_YIELD_TO_NEW = frozenset({"only", "wants", "revise", "comparative", "should_be"})

# Cues a question or a request can also contain ("what is wrong with it?").
_MAY_BE_ASKED = frozenset({"wrong", "missing", "not_done", "should_have"})

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
    "not_our_way": ("our", "my", "how", "what", "we"),
    "too_much": ("too",),
    "missing": ("missing",),
    "not_done": ("you",),
    "should_have": ("should",),
    "i_said": ("said", "told", "asked"),
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


def _asked(text: str, start: int) -> bool:
    return bool(_ASKING_BEFORE.search(text[max(0, start - 40) : start]))


def _complains(cue: str, pattern: re.Pattern[str], head: str) -> bool:
    if cue not in _MAY_BE_ASKED:
        return bool(pattern.search(head))
    return any(not _asked(head, m.start()) for m in pattern.finditer(head))


def _asks_otherwise(head: str, folded: str) -> str:
    """The cue of a request for a different output than the one given (see the module
    docstring), or ``""``. ``folded``: the head case-folded (a cheap first look)."""
    if any(w in folded for w in ("instead", "rather", "not", "meant")) and _CONTRAST.search(head):
        return "instead"
    for clause in _CLAUSES.split(head):
        opener = _OPENER.match(clause)
        ask = _ASKS.match(clause, opener.end() if opener else 0)
        if not ask or not ask.lastgroup:
            continue
        if ask.lastgroup not in _YIELD_TO_NEW or not _NEW_REQUEST.search(head):
            return ask.lastgroup
        return ""  # a new request's ask
    return ""


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
        if cue not in seen and _may_match(cue, pattern, folded) and _complains(cue, pattern, head):
            seen.add(cue)
            found.append(FeedbackSignal(sentiment=Sentiment.NEGATIVE, cue=cue, turn=turn))
    ask = "" if found else _asks_otherwise(head, folded)
    if ask:
        found.append(FeedbackSignal(sentiment=Sentiment.NEGATIVE, cue=ask, turn=turn))
    for cue, pattern in _POSITIVE:
        if cue in seen or not _may_match(cue, pattern, folded):
            continue
        match = pattern.search(head)
        if match and not _negated(head, match.start()):
            seen.add(cue)
            found.append(FeedbackSignal(sentiment=Sentiment.POSITIVE, cue=cue, turn=turn))
    return tuple(found)
