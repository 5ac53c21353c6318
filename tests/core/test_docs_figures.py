"""The handoff page's sittings and prompts are a dated measurement, not loose figures.

It said 16 sittings and 420 prompts for the lift world when a night took 26 and 770, and
15 and 286 for the demo when it took 30 and 542 (issue 32, item 13): counts that move with
every change to how a night decides. ``bench/handoff.py`` measures them; the page may quote
a measurement only in a paragraph that says when and at which commit it was taken.
"""

from __future__ import annotations

import re
from pathlib import Path

HANDOFF = Path(__file__).resolve().parents[2] / "docs" / "handoff.md"
COUNT = re.compile(r"\b\d[\d,]*\s+(?:sittings?|prompts?|calls?)\b", re.I)
STAMP = re.compile(r"^Measured on \d{4}-\d{2}-\d{2}, on main `[0-9a-f]{7,40}`")
COUNT_TABLE = re.compile(r"^\|.*\|\s*(?:sittings|prompts)\b[^|\n]*\|.*$", re.I | re.M)


def undated_counts(text: str) -> list[str]:
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    loose = [p for p in paragraphs if COUNT.search(p) and not STAMP.match(p)]
    return loose + COUNT_TABLE.findall(text)


def test_undated_counts_are_found() -> None:
    assert undated_counts("| Project | Sittings |\n|---|---|\n| demo | 15 |\n") != []
    assert undated_counts("A night took 15 sittings.\n") != []
    assert undated_counts("Measured on 2026-12-02, on main `d7f5c9a`: 30 sittings.\n") == []


def test_the_handoff_page_quotes_counts_only_with_their_date_and_commit() -> None:
    assert undated_counts(HANDOFF.read_text(encoding="utf-8")) == []
