"""The optimizer's meta skill: an editing-strategy memory carried from one epoch to the next.

It is optimizer-side context only (analyst, merge and rank prompts); it never enters the
target's skill and is not shown to the rewrite prompt.
"""

from __future__ import annotations

__all__ = ["meta_context"]


def meta_context(content: str) -> str:
    """The text placed in an optimizer prompt's memory section."""
    content = content.strip()
    if not content:
        return "(none)"
    return (
        "Strategy notes from earlier epochs; prefer them when the evidence is ambiguous:\n"
        + content
    )
