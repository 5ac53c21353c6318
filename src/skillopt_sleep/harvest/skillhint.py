"""Which skill a session exercised, from what its transcript shows.

Agents load a skill in one of three ways, and each leaves a different trace:

- a dedicated tool: Claude Code's ``Skill`` (``input.skill``), Copilot's ``skill``
  (``arguments.skill``), OpenCode's ``skill`` (``input.name``), Copilot CLI's
  ``skill.invoked`` event; the readers take the name from there;
- reading the skill's file with an ordinary tool (Codex runs ``cat .../SKILL.md``, Pi,
  Cursor and VS Code read it): :func:`skill_in_text` finds a ``<skills dir>/<name>/SKILL.md``
  path in the tool call's arguments;
- the user invoking it (Pi's ``/skill:name`` expands into a ``<skill name="...">`` block
  that opens the user's message): :func:`split_skill_block`.
"""

from __future__ import annotations

import re

__all__ = ["SKILL_FILE", "skill_in_text", "split_skill_block"]

SKILL_FILE = "SKILL.md"
# .../skills/<name>/SKILL.md (a URI or a Windows path too); the name is a directory name
_SKILL_PATH = re.compile(r"skills[\\/]+([A-Za-z0-9][\w.:-]{0,79})[\\/]+SKILL\.md\b")
_SKILL_BLOCK = re.compile(r'^\s*<skill\s+name="([^"]{1,80})"[^>]*>', re.DOTALL)
_BLOCK_END = "</skill>"
_USER_PREFIX = re.compile(r"^\s*User:\s*", re.IGNORECASE)


def skill_in_text(text: str) -> str:
    """The skill whose ``SKILL.md`` a tool call's arguments name, or "" (none or several)."""
    names = set(_SKILL_PATH.findall(text))
    return names.pop() if len(names) == 1 else ""


def split_skill_block(text: str) -> tuple[str, str]:
    """``(skill, request)`` for a message that opens with a ``<skill name="...">`` block:
    the skill's name and the user's own words after the block ("" when there are none).
    ``("", text)`` for any other message."""
    match = _SKILL_BLOCK.match(text)
    if match is None:
        return "", text
    end = text.find(_BLOCK_END, match.end())
    rest = "" if end < 0 else text[end + len(_BLOCK_END) :]
    return match.group(1), _USER_PREFIX.sub("", rest, count=1).strip()
