"""Helpers shared by the transcript readers: noise filter, clipping, scope, session builder."""

from __future__ import annotations

import os
import re
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from skillopt.redact import sanitize
from skillopt_sleep.harvest.digest import FeedbackSignal, SessionDigest, SourceKind
from skillopt_sleep.harvest.feedback import detect_feedback
from skillopt_sleep.harvest.timeparse import parse_instant

__all__ = [
    "MAX_FINALS",
    "MAX_FINAL_CHARS",
    "MAX_INTENTS",
    "MAX_INTENT_CHARS",
    "MAX_TOOLS",
    "SELF_MARKER",
    "DropReason",
    "SessionBuilder",
    "clean_tool_name",
    "clip",
    "in_scope",
    "is_noise",
    "resolve_dir",
]

SELF_MARKER = "<!-- skillopt:self-generated; the harvester skips sessions that open with this -->"
"""Every prompt skillopt sends to an agent carries this line; sessions opening with it are ours."""

MAX_INTENTS = 12
MAX_INTENT_CHARS = 4000
MAX_FINALS = 5
MAX_FINAL_CHARS = 4000
MAX_TOOLS = 64

_WRAPPER = re.compile(r"^<[A-Za-z_][\w:-]*(?:\s[^>]*)?>")
_NOISE_PREFIXES = (
    "[Pasted text",
    "Caveat:",
    "[Request interrupted",
    "# AGENTS.md instructions",
    "# /",
)
_NOISE_INSIDE = ("<command-message>", "<command-name>", "<local-command-stdout>")
_TOOL_NAME = re.compile(r"[^A-Za-z0-9_.:-]")
# Raw text is kept this far past the clip point so a secret straddling the clip point is
# still whole when redacted (redaction runs once, at build time, on what is kept).
_REDACT_MARGIN = 4096


class DropReason(StrEnum):
    """Why a parsed session did not become a digest (counted in diagnostics)."""

    SELF_GENERATED = "self_generated"
    OUT_OF_SCOPE = "out_of_scope"
    BEFORE_CURSOR = "before_cursor"
    NO_USER_INTENT = "no_user_intent"
    DUPLICATE = "duplicate"


def is_noise(text: str) -> bool:
    """True for messages that are not the user's own words (wrappers, slash commands)."""
    stripped = text.strip()
    if not stripped:
        return True
    if stripped.startswith(_NOISE_PREFIXES) or _WRAPPER.match(stripped):
        return True
    if any(tag in stripped[:200] for tag in _NOISE_INSIDE):
        return True
    return stripped.startswith("/") and len(stripped.split()) <= 3


def clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 2].rstrip() + " …"


def _clean(text: str, limit: int) -> str:
    return clip(sanitize(text), limit)


def clean_tool_name(name: str) -> str:
    return _TOOL_NAME.sub("", name)[:80]


def resolve_dir(path: str | os.PathLike[str]) -> Path:
    """Absolute, symlink-free form of ``path`` (which need not exist any more)."""
    return Path(os.path.realpath(os.path.expanduser(path)))


def in_scope(cwd: Path | None, project: Path | None) -> bool:
    """The project itself or one of its subdirectories; never an ancestor of it."""
    if project is None:
        return True
    if cwd is None:
        return False
    return cwd == project or project in cwd.parents


@dataclass(slots=True)
class SessionBuilder:
    """Mutable accumulator one reader fills while walking a transcript."""

    source: SourceKind
    path: Path
    self_markers: tuple[str, ...] = (SELF_MARKER,)
    session_id: str = ""
    cwd: str = ""
    git_branch: str = ""
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    intents: list[str] = field(default_factory=list)
    finals: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_FINALS))
    tools: dict[str, None] = field(default_factory=dict)
    skills: dict[str, None] = field(default_factory=dict)
    feedback: list[FeedbackSignal] = field(default_factory=list)
    n_user: int = 0
    n_assistant: int = 0
    self_generated: bool = False

    def saw_time(self, value: object) -> None:
        moment = parse_instant(value)
        if moment is None:
            return
        if self.first_seen is None or moment < self.first_seen:
            self.first_seen = moment
        if self.last_seen is None or moment > self.last_seen:
            self.last_seen = moment

    def saw_cwd(self, value: object) -> None:
        """The first usable working directory wins (a NUL byte makes a path unusable)."""
        if not self.cwd and isinstance(value, str) and "\x00" not in value:
            self.cwd = value

    def add_user_text(self, raw: str) -> None:
        if not self.intents and any(m in raw for m in self.self_markers):
            self.self_generated = True
        if self.self_generated or is_noise(raw):
            return
        turn = self.n_user
        self.n_user += 1
        self.feedback.extend(detect_feedback(raw, turn))
        if len(self.intents) < MAX_INTENTS:
            self.intents.append(raw[: MAX_INTENT_CHARS + _REDACT_MARGIN])

    def add_assistant_text(self, raw: str) -> None:
        if not raw.strip():
            return
        self.n_assistant += 1
        self.finals.append(raw[: MAX_FINAL_CHARS + _REDACT_MARGIN])

    def add_tool(self, name: str) -> None:
        cleaned = clean_tool_name(name)
        if cleaned and len(self.tools) < MAX_TOOLS:
            self.tools.setdefault(cleaned, None)

    def add_skill(self, name: str) -> None:
        cleaned = clean_tool_name(name)
        if cleaned and len(self.skills) < MAX_TOOLS:
            self.skills.setdefault(cleaned, None)

    def build(self, *, fallback_time: datetime) -> SessionDigest | DropReason:
        if self.self_generated:
            return DropReason.SELF_GENERATED
        if not self.intents:
            return DropReason.NO_USER_INTENT
        started = self.first_seen or fallback_time
        ended = self.last_seen or fallback_time
        return SessionDigest(
            source=self.source,
            session_id=sanitize(self.session_id or self.path.stem),
            path=self.path,
            cwd=resolve_dir(self.cwd) if self.cwd else None,
            started_at=started,
            ended_at=max(started, ended),
            user_intents=tuple(_clean(t, MAX_INTENT_CHARS) for t in self.intents),
            assistant_finals=tuple(_clean(t, MAX_FINAL_CHARS) for t in self.finals),
            tools_used=tuple(self.tools),
            skills_used=tuple(self.skills),
            feedback=tuple(self.feedback),
            git_branch=sanitize(self.git_branch)[:200],
            n_user_turns=self.n_user,
            n_assistant_turns=self.n_assistant,
        )
