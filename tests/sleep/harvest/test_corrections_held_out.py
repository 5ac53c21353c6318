"""Corrections read by what they ask for (issue 32, item 14), measured on held-out
sessions in each agent's own transcript format (``support/held_out_corrections.py``,
written before the reader changed): a Pi session file per conversation, an OpenCode
database holding them all, each read back by the real harvest.

A correction is the user's next message asking for a different output or behaviour; it
must come back as negative feedback on that turn. A question, thanks or a new request must
not. The thresholds are the issue's: >= 22 of 24 corrections per agent; and at most one
control of 24 per agent taken for a correction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skillopt_sleep.harvest import SourceKind, SourceSpec, harvest
from skillopt_sleep.harvest.digest import Sentiment, SessionDigest
from support import agent_sessions as agent
from support.held_out_corrections import CONTROLS, OPENCODE_CORRECTIONS, PI_CORRECTIONS
from support.transcripts import Turn

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
Conversation = tuple[str, str]


def _pi_sessions(home: Path, project: Path, conversations: Sequence[Conversation]) -> None:
    for n, (request, follow_up) in enumerate(conversations):
        start = T0 + timedelta(minutes=10 * n)
        at = [start + timedelta(minutes=m) for m in range(4)]
        sid = f"pi-{n:02d}"
        path = agent.jsonl(
            agent.pi_path(home, project, start, sid),
            [
                agent.pi_header(sid, project, start, 3),
                agent.pi_message("u1", None, at[0], agent.pi_user(request)),
                agent.pi_message(
                    "a1", "u1", at[1], agent.pi_assistant("Done: here it is.", [("edit", {})])
                ),
                agent.pi_message("u2", "a1", at[2], agent.pi_user(follow_up)),
                agent.pi_message("a2", "u2", at[3], agent.pi_assistant("Updated.")),
            ],
        )
        agent.set_mtime(path, at[3])


def _opencode_sessions(db: Path, project: Path, conversations: Sequence[Conversation]) -> None:
    sessions = [
        agent.StoredSession(
            cwd=str(project),
            session_id=f"ses_{n:02d}",
            start=T0 + timedelta(minutes=10 * n),
            turns=[
                Turn(user=request, answer="Done: here it is.", tools=["edit"]),
                Turn(user=follow_up, answer="Updated."),
            ],
        )
        for n, (request, follow_up) in enumerate(conversations)
    ]
    with agent.writer_holding(agent.wal_database(db, agent.OPENCODE_SCHEMA)) as conn:
        agent.store_opencode_sessions(conn, sessions)


def _read(kind: SourceKind, home: Path, project: Path) -> list[SessionDigest]:
    found = harvest([SourceSpec(kind=kind, home=home)], since=None, project=project, limit=500)
    return list(found.digests)


def corrected(digest: SessionDigest) -> bool:
    """The follow-up (turn 1) came back as negative feedback."""
    return any(s.sentiment is Sentiment.NEGATIVE and s.turn == 1 for s in digest.feedback)


def score(kind: SourceKind, root: Path, conversations: Sequence[Conversation]) -> int:
    """How many of ``conversations``' follow-ups read as corrections, as ``kind`` stores them."""
    project = root / "work" / "shop"
    project.mkdir(parents=True, exist_ok=True)
    if kind is SourceKind.PI:
        home = root / "pi-sessions"
        _pi_sessions(home, project, conversations)
    else:
        home = root / "opencode" / "opencode.db"  # the database is the source's home
        _opencode_sessions(home, project, conversations)
    digests = _read(kind, home, project)
    assert len(digests) == len(conversations)
    return sum(corrected(d) for d in digests)


@pytest.mark.parametrize(
    ("kind", "corrections"),
    [(SourceKind.PI, PI_CORRECTIONS), (SourceKind.OPENCODE, OPENCODE_CORRECTIONS)],
)
def test_held_out_corrections_read_as_corrections(
    kind: SourceKind, corrections: Sequence[Conversation], tmp_path: Path
) -> None:
    assert len(corrections) == 24
    assert score(kind, tmp_path, corrections) >= 22


@pytest.mark.parametrize("kind", [SourceKind.PI, SourceKind.OPENCODE])
def test_questions_thanks_and_new_requests_are_not_corrections(
    kind: SourceKind, tmp_path: Path
) -> None:
    assert len(CONTROLS) == 24
    assert score(kind, tmp_path, CONTROLS) <= 1
