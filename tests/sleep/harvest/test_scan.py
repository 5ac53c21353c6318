"""Harvest: real transcript trees in tmp dirs, both sources, cursor, scope, self-filter."""

from __future__ import annotations

import json
import tracemalloc
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from skillopt_sleep.harvest import (
    SELF_MARKER,
    SourceKind,
    SourceSpec,
    harvest,
)
from support.transcripts import Turn, write_claude_session, write_codex_session

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)


@pytest.fixture
def homes(tmp_path: Path) -> tuple[Path, Path, Path]:
    claude, codex, project = tmp_path / "claude", tmp_path / "codex", tmp_path / "work" / "proj"
    project.mkdir(parents=True)
    return claude, codex, project


def _specs(claude: Path, codex: Path) -> list[SourceSpec]:
    return [
        SourceSpec(kind=SourceKind.CLAUDE_CODE, home=claude),
        SourceSpec(kind=SourceKind.CODEX, home=codex),
    ]


def test_claude_session_becomes_a_digest(homes: tuple[Path, Path, Path]) -> None:
    claude, codex, project = homes
    write_claude_session(
        claude,
        cwd=project,
        session_id="s1",
        start=T0,
        skill="pdf-tools",
        turns=[
            Turn(user="Summarise the changelog in five bullets", tools=["Read"]),
            Turn(user="no, that's wrong: use the 2.x section", answer="Here are 5 bullets"),
            Turn(user="/clear"),
            Turn(user="<command-name>/model</command-name>"),
        ],
    )
    result = harvest(_specs(claude, codex), since=None, project=project, limit=10)
    (digest,) = result.digests
    assert digest.source is SourceKind.CLAUDE_CODE
    assert digest.session_id == "s1"
    assert digest.user_intents == (
        "Summarise the changelog in five bullets",
        "no, that's wrong: use the 2.x section",
    )
    assert digest.final_answer == "Done."
    assert "Here are 5 bullets" in digest.assistant_finals
    assert digest.tools_used == ("Read", "Skill")
    assert digest.skill_hint == "pdf-tools"
    assert digest.cwd == project.resolve()
    assert digest.started_at == T0 and digest.started_at.tzinfo is not None
    assert digest.ended_at > digest.started_at
    assert [s.label() for s in digest.feedback] == ["neg:no", "neg:wrong"]
    assert digest.n_user_turns == 2


def test_codex_live_and_archived_sessions_without_duplicate_prompts(
    homes: tuple[Path, Path, Path],
) -> None:
    claude, codex, project = homes
    write_codex_session(
        codex,
        cwd=project,
        session_id="live",
        start=T0,
        turns=[Turn(user="Add a --json flag to the CLI", tools=["shell", "apply_patch"])],
    )
    write_codex_session(
        codex,
        cwd=project,
        session_id="old",
        start=T0 - timedelta(days=1),
        archived=True,
        turns=[Turn(user="Rename the config loader", answer="Renamed.")],
    )
    result = harvest(_specs(claude, codex), since=None, project=project, limit=10)
    assert [d.session_id for d in result.digests] == ["live", "old"]  # newest first
    live = result.digests[0]
    assert live.source is SourceKind.CODEX
    assert live.user_intents == ("Add a --json flag to the CLI",)  # no env context, no dup
    assert live.tools_used == ("shell", "apply_patch")
    assert live.final_answer == "Done."
    assert live.git_branch == "main"


def test_cursor_is_compared_as_an_instant_across_timezones(
    homes: tuple[Path, Path, Path],
) -> None:
    claude, codex, project = homes
    plus_two = timezone(timedelta(hours=2))
    # Last event at 10:31+02:00 == 08:31Z.
    write_claude_session(
        claude,
        cwd=project,
        start=datetime(2026, 11, 20, 10, 30, tzinfo=plus_two),
        turns=[Turn(user="Explain the failing migration test")],
    )
    specs = _specs(claude, codex)
    # 09:00Z is after the session: a string compare of "10:31+02:00" > "09:00Z" would keep it.
    assert harvest(specs, since=T0 + timedelta(hours=1), project=project, limit=5).digests == ()
    # 03:00-05:00 == 08:00Z is before the session end.
    minus_five = timezone(timedelta(hours=-5))
    early = datetime(2026, 11, 20, 3, 0, tzinfo=minus_five)
    assert len(harvest(specs, since=early, project=project, limit=5).digests) == 1
    # A naive cursor is UTC.
    naive = datetime(2026, 11, 20, 8, 30, 30)
    assert len(harvest(specs, since=naive, project=project, limit=5).digests) == 1


def test_session_content_before_cursor_is_dropped_even_if_file_is_new(
    homes: tuple[Path, Path, Path],
) -> None:
    claude, codex, project = homes
    path = write_claude_session(
        claude, cwd=project, start=T0, turns=[Turn(user="Refactor the parser module")]
    )
    path.touch()  # file modified now, but its content ended at T0+2min
    result = harvest(_specs(claude, codex), since=T0 + timedelta(hours=1), project=project, limit=5)
    assert result.digests == ()
    assert result.diagnostics.dropped == {"before_cursor": 1}


def test_old_files_are_not_opened(homes: tuple[Path, Path, Path]) -> None:
    claude, codex, project = homes
    write_claude_session(claude, cwd=project, start=T0, turns=[Turn(user="Old request here")])
    result = harvest(_specs(claude, codex), since=T0 + timedelta(days=1), project=project, limit=5)
    assert result.diagnostics.files_older_than_cursor == 1
    assert result.diagnostics.files_read == 0


def test_project_scope_includes_subdirs_never_ancestors_or_siblings(
    homes: tuple[Path, Path, Path],
) -> None:
    claude, codex, project = homes
    places = {
        "same": project,
        "sub": project / "pkg" / "mod",
        "ancestor": project.parent,
        "sibling": project.parent / (project.name + "-other"),
        "root": Path("/"),
    }
    for i, (name, cwd) in enumerate(places.items()):
        write_claude_session(
            claude,
            cwd=cwd,
            session_id=name,
            start=T0 + timedelta(minutes=10 * i),
            turns=[Turn(user=f"Request number {i} for {name}")],
        )
    result = harvest(_specs(claude, codex), since=None, project=project, limit=10)
    assert sorted(d.session_id for d in result.digests) == ["same", "sub"]
    assert result.diagnostics.dropped == {"out_of_scope": 3}
    everything = harvest(_specs(claude, codex), since=None, project=None, limit=10)
    assert len(everything.digests) == 5


def test_self_generated_sessions_are_dropped_by_marker(homes: tuple[Path, Path, Path]) -> None:
    claude, codex, project = homes
    ours = f"{SELF_MARKER}\nYou are attempting a task. Answer briefly."
    write_claude_session(claude, cwd=project, session_id="ours", start=T0, turns=[Turn(user=ours)])
    write_codex_session(codex, cwd=project, session_id="ours2", start=T0, turns=[Turn(user=ours)])
    write_claude_session(
        claude,
        cwd=project,
        session_id="user",
        start=T0,
        turns=[Turn(user="Why is the marker test failing?"), Turn(user=f"see {SELF_MARKER}")],
    )
    result = harvest(_specs(claude, codex), since=None, project=project, limit=10)
    assert [d.session_id for d in result.digests] == ["user"]
    assert result.diagnostics.dropped == {"self_generated": 2}


def test_extra_self_markers(homes: tuple[Path, Path, Path]) -> None:
    claude, codex, project = homes
    write_claude_session(
        claude, cwd=project, start=T0, turns=[Turn(user="You are a memory agent. Compress.")]
    )
    result = harvest(
        _specs(claude, codex),
        since=None,
        project=project,
        limit=5,
        extra_self_markers=["You are a memory agent"],
    )
    assert result.digests == ()


def test_malformed_lines_and_files_are_skipped_and_counted(
    homes: tuple[Path, Path, Path],
) -> None:
    claude, codex, project = homes
    write_claude_session(
        claude,
        cwd=project,
        session_id="ok",
        start=T0,
        turns=[Turn(user="Fix the flaky login test")],
        extra_lines=["{not json", "[1, 2, 3]", '"a string"', '{"type": "user", "message": 5}'],
    )
    bad = claude / "projects" / "x" / "binary.jsonl"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"\xff\xfe\x00garbage\n\x80\x81\n")
    weird = codex / "sessions" / "2026" / "weird.jsonl"
    weird.parent.mkdir(parents=True)
    weird.write_text(json.dumps({"type": "event_msg", "payload": {"type": "user_message"}}) + "\n")
    result = harvest(_specs(claude, codex), since=None, project=None, limit=10)
    assert [d.session_id for d in result.digests] == ["ok"]
    diag = result.diagnostics
    assert diag.malformed_lines == 5  # 3 bad lines in "ok" + 2 in binary.jsonl
    assert diag.dropped.get("no_user_intent") == 2
    assert diag.files_read == 3


def test_overlong_lines_are_skipped_in_bounded_memory(homes: tuple[Path, Path, Path]) -> None:
    claude, codex, project = homes
    huge = json.dumps({"type": "user", "message": {"role": "user", "content": "x" * 1_000_000}})
    path = write_claude_session(
        claude,
        cwd=project,
        start=T0,
        turns=[Turn(user="Start of the session here")],
        extra_lines=[huge] * 8,
    )
    with path.open("a") as fh:
        fh.write(json.dumps({"type": "user", "message": {"role": "user", "content": "thanks!"}}))
        fh.write("\n")
    tracemalloc.start()
    try:
        result = harvest(
            _specs(claude, codex), since=None, project=project, limit=5, max_line_bytes=64_000
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    (digest,) = result.digests
    assert result.diagnostics.overlong_lines == 8
    assert digest.user_intents == ("Start of the session here", "thanks!")
    assert peak < 2_000_000  # one 1 MB line would already exceed half of this


def test_secrets_are_redacted_in_digests(homes: tuple[Path, Path, Path]) -> None:
    claude, codex, project = homes
    key = "sk-ant-api03-" + "A1b2C3d4E5f6G7h8" * 3
    token = "ghp_" + "Z" * 36
    write_claude_session(
        claude,
        cwd=project,
        start=T0,
        turns=[Turn(user=f"Use the key {key} to call the API", answer=f"Pushed with {token}")],
    )
    write_codex_session(
        codex, cwd=project, start=T0, turns=[Turn(user=f"export OPENAI_API_KEY={key} then run")]
    )
    result = harvest(_specs(claude, codex), since=None, project=project, limit=5)
    dumped = json.dumps([d.to_dict() for d in result.digests])
    assert len(result.digests) == 2
    assert key not in dumped and token not in dumped
    assert "[REDACTED:" in dumped


def test_limit_keeps_the_newest_sessions(homes: tuple[Path, Path, Path]) -> None:
    claude, codex, project = homes
    for i in range(6):
        write_claude_session(
            claude,
            cwd=project,
            session_id=f"s{i}",
            start=T0 + timedelta(hours=i),
            turns=[Turn(user=f"Task number {i} in the list")],
        )
    result = harvest(_specs(claude, codex), since=None, project=project, limit=3)
    assert [d.session_id for d in result.digests] == ["s5", "s4", "s3"]


def test_subagents_sidechains_and_compact_summaries_are_ignored(
    homes: tuple[Path, Path, Path],
) -> None:
    claude, codex, project = homes
    main = write_claude_session(
        claude, cwd=project, session_id="main", start=T0, turns=[Turn(user="Main request text")]
    )
    sub = main.parent / "subagents" / "agent-1.jsonl"
    sub.parent.mkdir()
    sub.write_text(main.read_text())
    (main.parent / "agent-2.jsonl").write_text(main.read_text())
    side = {"type": "user", "isSidechain": True, "message": {"role": "user", "content": "side"}}
    compact = {
        "type": "user",
        "isCompactSummary": True,
        "message": {"role": "user", "content": "This session is being continued from ..."},
    }
    with main.open("a") as fh:
        fh.write(json.dumps(side) + "\n" + json.dumps(compact) + "\n")
    result = harvest(_specs(claude, codex), since=None, project=project, limit=10)
    assert [d.user_intents for d in result.digests] == [("Main request text",)]
    assert result.diagnostics.files_seen == 1


def test_missing_homes_give_an_empty_result(tmp_path: Path) -> None:
    result = harvest(
        _specs(tmp_path / "nope", tmp_path / "nada"), since=None, project=None, limit=5
    )
    assert result.digests == () and result.diagnostics.files_seen == 0


def test_missing_timestamps_fall_back_to_file_mtime(homes: tuple[Path, Path, Path]) -> None:
    claude, codex, project = homes
    path = claude / "projects" / "p" / "nots.jsonl"
    path.parent.mkdir(parents=True)
    rec = {"type": "user", "cwd": str(project), "message": {"role": "user", "content": "Do it now"}}
    path.write_text(json.dumps(rec) + "\n")
    (digest,) = harvest(_specs(claude, codex), since=None, project=project, limit=5).digests
    assert digest.started_at.tzinfo is not None
    assert abs((datetime.now(UTC) - digest.ended_at).total_seconds()) < 60


def test_secret_straddling_the_clip_point_is_not_leaked(homes: tuple[Path, Path, Path]) -> None:
    claude, codex, project = homes
    key = "sk-ant-api03-" + "K9x" * 20
    text = "a" * 3985 + " " + key + " tail"
    write_claude_session(claude, cwd=project, start=T0, turns=[Turn(user=text, answer=text)])
    (digest,) = harvest(_specs(claude, codex), since=None, project=project, limit=5).digests
    dumped = json.dumps(digest.to_dict())
    assert key[:14] not in dumped  # not even the head of the key survives the clip
    assert len(digest.user_intents[0]) <= 4000


def test_legacy_codex_rollout_without_envelopes(homes: tuple[Path, Path, Path]) -> None:
    claude, codex, _project = homes
    path = codex / "sessions" / "rollout-2025-05-01-legacy.jsonl"
    path.parent.mkdir(parents=True)
    lines = [
        {"id": "legacy-1", "timestamp": "2025-05-01T10:00:00Z", "instructions": None},
        {"record_type": "state"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Port the"
         " build script to Python"}]},
        {"type": "function_call", "name": "shell", "arguments": "{}"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text",
         "text": "Ported."}]},
    ]  # fmt: skip
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    (digest,) = harvest(_specs(claude, codex), since=None, project=None, limit=5).digests
    assert digest.session_id == "legacy-1"
    assert digest.user_intents == ("Port the build script to Python",)
    assert digest.final_answer == "Ported." and digest.tools_used == ("shell",)
    assert digest.started_at == datetime(2025, 5, 1, 10, 0, tzinfo=UTC)
