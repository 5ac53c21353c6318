"""Sessions an agent told us have just finished, so the next night reads them first.

An agent's session-end hook (the Claude Code plugin's ``SessionEnd``) runs
``skillopt-sleep session-end``, which appends one line to
``<state_dir>/finished_sessions.jsonl``: the transcript's path, the session id, the agent
and the working directory. The record is state-wide, not per project: a session started in
a sub-folder of a project is still that project's, and the harvest's own scope check
decides which project a session belongs to. The harvest reads the record and puts these
sessions at the head of its reading order (:func:`priority_of`); nothing else changes,
so a night without a record harvests exactly as before.

The file only grows by whole lines (:func:`~skillopt.atomicio.append_jsonl`); it is
trimmed to the newest :data:`KEEP` lines when it passes twice that. A line that cannot be
parsed is skipped: the record only orders sessions, it never decides what is read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skillopt.atomicio import append_jsonl, atomic_write_text
from skillopt.logging import get_logger
from skillopt.redact import sanitize

__all__ = [
    "FILE_NAME",
    "KEEP",
    "FinishedSession",
    "finished_path",
    "from_hook_payload",
    "priority_of",
    "read_finished",
    "record_finished",
]

FILE_NAME = "finished_sessions.jsonl"
KEEP = 200
_MAX_FIELD = 4096
_log = get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishedSession:
    """One finished session as its agent reported it (``transcript`` may be empty when
    the agent named only the session id)."""

    agent: str
    session_id: str
    transcript: str
    cwd: str
    finished_at: datetime
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "session_id": self.session_id,
            "transcript": self.transcript,
            "cwd": self.cwd,
            "finished_at": self.finished_at.isoformat(),
            "reason": self.reason,
        }


def finished_path(state_dir: Path) -> Path:
    return Path(state_dir).expanduser() / FILE_NAME


def _text(value: Any) -> str:
    return sanitize(value)[:_MAX_FIELD] if isinstance(value, str) else ""


def from_hook_payload(
    payload: Mapping[str, Any], *, agent: str, now: datetime, cwd: str = ""
) -> FinishedSession | None:
    """The session a hook's JSON names (``session_id``, ``transcript_path``, ``cwd``,
    ``reason``), or ``None`` when it names neither a transcript nor a session."""
    session_id = _text(payload.get("session_id") or payload.get("sessionId"))
    transcript = _text(payload.get("transcript_path") or payload.get("transcriptPath"))
    if not session_id and not transcript:
        return None
    if transcript:
        transcript = os.path.realpath(os.path.expanduser(transcript))
    return FinishedSession(
        agent=agent,
        session_id=session_id,
        transcript=transcript,
        cwd=_text(payload.get("cwd")) or cwd,
        finished_at=now.astimezone(UTC),
        reason=_text(payload.get("reason")),
    )


def record_finished(state_dir: Path, session: FinishedSession) -> Path:
    """Append ``session`` to the record (trimmed to the newest :data:`KEEP` lines once it
    holds twice as many); returns the record's path."""
    path = finished_path(state_dir)
    append_jsonl(path, [session.to_dict()])
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if len(lines) > 2 * KEEP:
        atomic_write_text(path, "".join(line + "\n" for line in lines[-KEEP:]))
    return path


def _parse(line: str) -> FinishedSession | None:
    try:
        data = json.loads(line)
        finished_at = datetime.fromisoformat(str(data["finished_at"])).astimezone(UTC)
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(data, dict):
        return None
    return FinishedSession(
        agent=_text(data.get("agent")),
        session_id=_text(data.get("session_id")),
        transcript=_text(data.get("transcript")),
        cwd=_text(data.get("cwd")),
        finished_at=finished_at,
        reason=_text(data.get("reason")),
    )


def read_finished(state_dir: Path) -> tuple[FinishedSession, ...]:
    """The recorded sessions, oldest first (none when there is no record)."""
    path = finished_path(state_dir)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ()
    except OSError as exc:
        _log.warning("finished_sessions.unreadable", path=str(path), error=str(exc))
        return ()
    found = [s for s in map(_parse, text.splitlines()) if s is not None]
    return tuple(found)


def priority_of(finished: Collection[FinishedSession]) -> frozenset[str]:
    """What the harvest matches a session against: each recorded transcript's real path,
    and each bare session id (for an agent that named only the id)."""
    keys = {s.transcript for s in finished if s.transcript}
    keys |= {f"id:{s.session_id}" for s in finished if s.session_id}
    return frozenset(keys)
