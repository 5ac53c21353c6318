"""Edits that cannot be meant: a reply that echoes its own prompt instead of proposing a rule.

A small model asked for edits often returns the prompt's example (``{"op": "add",
"content": "<instruction>"}``), a placeholder (``...``, ``TODO``, a template slot in angle
brackets) or a line of the prompt's own instructions ("Each edit is one short, general
instruction"). None of these is a rule anyone meant; testing one costs a gate's worth of
model calls and only the statistics keep it out. :func:`unmeant_reason` tells them apart
from real edits by the prompt template alone (never by the documents the prompt carries,
which may hold angle brackets of their own, such as ``<answer>`` tags), before any trial.
"""

from __future__ import annotations

import re
from functools import cache

from skillopt.prompts import load_prompt
from skillopt.replies import json_values

__all__ = ["unmeant_reason"]

_PLACEHOLDER = re.compile(r"\{\{\s*[A-Za-z_][A-Za-z0-9_]*\s*\}\}")
# A template slot: words in angle brackets, lower case, as a prompt's example shows them.
_SLOT = re.compile(r"<[a-z][a-z0-9 _'-]*>")
_FILLERS = frozenset(
    {"", "...", "…", "todo", "tbd", "fixme", "xxx", "placeholder", "instruction", "n/a", "none"}
)
_SHORTEST_ECHO = 16  # characters of the prompt's own text an edit must repeat to be an echo


def _norm(text: str) -> str:
    return " ".join(text.lower().split()).strip(" .\"'`")


@cache
def _template(name: str) -> tuple[str, frozenset[str], frozenset[str]]:
    """Template ``name``'s own text (placeholders removed, normalised), its slots and the
    contents of the examples it shows."""
    raw = _PLACEHOLDER.sub("\n", load_prompt(name))
    examples: set[str] = set()
    for value in json_values(raw):
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, dict):
                examples.update(_norm(str(v)) for v in item.values() if isinstance(v, str))
    return _norm(raw), frozenset(_SLOT.findall(raw)), frozenset(e for e in examples if e)


def unmeant_reason(content: str, *, template: str, instructions: str = "") -> str:
    """Why an edit's ``content`` cannot be meant, asked with prompt ``template``; "" when it
    may be (the edit then goes to the gate like any other). ``instructions`` is guidance the
    caller spliced into the template's slots (its own words, never the documents it carries):
    repeating it is an echo too."""
    text = _norm(content)
    fixed, slots, examples = _template(template)
    if text in examples:
        return f"the prompt's own example: {content.strip()[:80]!r}"
    if text in _FILLERS or _SLOT.fullmatch(text) or set(text) <= set(".…-_ "):
        return f"a placeholder, not a rule: {content.strip()[:80]!r}"
    slot = next((s for s in slots if s in content.lower()), "")
    if slot:
        return f"holds the prompt's template slot {slot}"
    if len(text) >= _SHORTEST_ECHO and (text in fixed or text in _norm(instructions)):
        return f"repeats the prompt's own instructions: {content.strip()[:80]!r}"
    return ""
