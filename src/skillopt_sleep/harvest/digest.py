"""The frozen record a harvester produces for one agent session."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

__all__ = ["FeedbackSignal", "Sentiment", "SessionDigest", "SourceKind"]


class SourceKind(StrEnum):
    """Where a transcript came from."""

    CLAUDE_CODE = "claude_code"
    CODEX = "codex"
    COPILOT = "copilot"  # VS Code Copilot Chat
    COPILOT_CLI = "copilot_cli"
    CURSOR = "cursor"
    PI = "pi"
    OPENCODE = "opencode"


class Sentiment(StrEnum):
    POSITIVE = "pos"
    NEGATIVE = "neg"


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedbackSignal:
    """One reaction of the user to the agent's previous answer.

    ``cue`` is a stable label ("not_working", "thanks", ...), never the user's raw words;
    ``turn`` is the index of the user message it was found in (0 = the opening request).
    """

    sentiment: Sentiment
    cue: str
    turn: int

    def label(self) -> str:
        return f"{self.sentiment.value}:{self.cue}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionDigest:
    """What the miner needs from one session; every text field is already redacted.

    Times are timezone-aware UTC instants. ``user_intents`` keeps the user's own
    messages in order (wrappers, slash commands and tool results removed);
    ``assistant_finals`` keeps the last few assistant replies, ``final_answer`` the last.
    """

    source: SourceKind
    session_id: str
    path: Path
    cwd: Path | None
    started_at: datetime
    ended_at: datetime
    user_intents: tuple[str, ...]
    assistant_finals: tuple[str, ...] = ()
    tools_used: tuple[str, ...] = ()
    skills_used: tuple[str, ...] = ()
    feedback: tuple[FeedbackSignal, ...] = ()
    git_branch: str = ""
    n_user_turns: int = 0
    n_assistant_turns: int = 0

    @property
    def final_answer(self) -> str:
        return self.assistant_finals[-1] if self.assistant_finals else ""

    @property
    def skill_hint(self) -> str:
        """The one skill the session used, or "" when it used none or several."""
        return self.skills_used[0] if len(self.skills_used) == 1 else ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source.value,
            "session_id": self.session_id,
            "path": str(self.path),
            "cwd": str(self.cwd) if self.cwd is not None else None,
            "started_at": self.started_at.isoformat(),
            "ended_at": self.ended_at.isoformat(),
            "user_intents": list(self.user_intents),
            "assistant_finals": list(self.assistant_finals),
            "tools_used": list(self.tools_used),
            "skills_used": list(self.skills_used),
            "feedback": [s.label() for s in self.feedback],
            "git_branch": self.git_branch,
            "n_user_turns": self.n_user_turns,
            "n_assistant_turns": self.n_assistant_turns,
        }
