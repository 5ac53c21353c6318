"""Sessions an agent reported finished (`skillopt-sleep session-end`): recorded from the
hook's JSON, and read first by the next night, through the real command and gather API."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skillopt_sleep.cli import main
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.harvest import SourceKind, SourceSpec, harvest
from skillopt_sleep.harvest.finished import (
    KEEP,
    FinishedSession,
    finished_path,
    priority_of,
    read_finished,
    record_finished,
)
from skillopt_sleep.night.gather_tasks import gather_night
from skillopt_sleep.tasks.archive import open_archive
from support.transcripts import Turn, write_claude_session

NOW = datetime(2026, 11, 25, 2, 30, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _session(home: Path, project: Path, sid: str, request: str, ended: datetime) -> Path:
    return write_claude_session(
        home, cwd=project, turns=[Turn(user=request)], start=ended - timedelta(minutes=2),
        session_id=sid,
    )  # fmt: skip


def _hook(monkeypatch: pytest.MonkeyPatch, payload: object) -> None:
    data = json.dumps(payload).encode()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_the_command_records_the_hook_payload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    transcript = tmp_path / "t" / "abc.jsonl"
    payload = {"session_id": "abc", "transcript_path": str(transcript), "cwd": str(tmp_path),
               "hook_event_name": "SessionEnd", "reason": "prompt_input_exit"}  # fmt: skip
    _hook(monkeypatch, payload)
    assert main(["session-end", "--state-dir", str(state), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["record"] == str(finished_path(state))
    (got,) = read_finished(state)
    assert (got.agent, got.session_id, got.transcript, got.cwd, got.reason) == (
        "claude", "abc", str(transcript), str(tmp_path), "prompt_input_exit",
    )  # fmt: skip
    assert priority_of([got]) == {str(transcript), "id:abc"}


@pytest.mark.parametrize("stdin", ["[1, 2]", "{not json", "{}", '{"cwd": "/x"}'])
def test_a_payload_naming_no_session_is_refused_and_records_nothing(
    stdin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    assert main(["session-end", "--state-dir", str(tmp_path)]) == 2
    assert not finished_path(tmp_path).exists()


def test_a_deeply_nested_payload_is_refused_with_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It raised RecursionError out of the hook (issue 32, item 15)."""
    deep = '{"session_id": "abc", "extra": ' + "[" * 100_000 + "]" * 100_000 + "}"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(deep.encode())))
    assert main(["session-end", "--state-dir", str(tmp_path)]) == 2
    assert "nested too deeply" in capsys.readouterr().err
    assert not finished_path(tmp_path).exists()


def test_the_record_skips_torn_lines_and_stays_bounded(tmp_path: Path) -> None:
    def one(i: int) -> FinishedSession:
        return FinishedSession(agent="claude", session_id=f"s{i}", transcript=f"/t/s{i}.jsonl",
                               cwd="/p", finished_at=NOW + timedelta(seconds=i))  # fmt: skip

    record_finished(tmp_path, one(0))
    with finished_path(tmp_path).open("a") as handle:
        handle.write('{"agent": "claude", "session_id": 3}\nnot json\n')
    record_finished(tmp_path, one(1))
    assert [s.session_id for s in read_finished(tmp_path)] == ["s0", "s1"]
    for i in range(2, 2 * KEEP + 2):
        record_finished(tmp_path, one(i))
    kept = read_finished(tmp_path)
    assert len(kept) <= 2 * KEEP and kept[-1].session_id == f"s{2 * KEEP + 1}"


def test_harvest_reads_the_reported_sessions_first(tmp_path: Path) -> None:
    home, project = tmp_path / "claude", tmp_path / "proj"
    project.mkdir()
    old = _session(home, project, "old", "Draft the release notes for 2.0", NOW - timedelta(days=1))
    _session(home, project, "new", "Rename the config loader module", NOW - timedelta(hours=1))
    specs = [SourceSpec(kind=SourceKind.CLAUDE_CODE, home=home)]
    plain = harvest(specs, since=None, project=project, limit=1)
    assert [d.session_id for d in plain.digests] == ["new"]  # newest first without a record
    reported = harvest(specs, since=None, project=project, limit=1, first={str(old.resolve())})
    assert [d.session_id for d in reported.digests] == ["old"]
    both = harvest(specs, since=None, project=project, limit=5, first={"id:old"})
    assert [d.session_id for d in both.digests] == ["old", "new"]


async def test_the_next_night_takes_the_hooks_session_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home, project, state = tmp_path / "claude", tmp_path / "proj", tmp_path / "state"
    (project / "sub").mkdir(parents=True)
    for i in range(4):
        _session(home, project, f"s{i}", f"Update the changelog entry {i}", NOW - i * HOUR)
    oldest = _session(home, project / "sub", "done", "Fix the flaky upload test", NOW - 24 * HOUR)
    cfg = SleepConfig.model_validate({
        "state_dir": str(state),
        "sources": {"kinds": ["claude_code"], "claude_home": str(home), "lookback_hours": 72,
                    "max_sessions": 2},
        "night": {"llm_mine": False, "max_tasks": 10},
    })  # fmt: skip

    async def night() -> list[str]:
        with open_archive(state / "tasks.sqlite", now=NOW) as archive:
            got = await gather_night(cfg, project=project, archive=archive, pool=None,
                                     use_llm=False, now=NOW)  # fmt: skip
        return [s for t in got.new_tasks for s in t.source_sessions]

    assert sorted(await night()) == ["s0", "s1"]
    _hook(monkeypatch, {"session_id": "done", "transcript_path": str(oldest),
                        "cwd": str(project / "sub")})  # fmt: skip
    assert main(["session-end", "--state-dir", str(state)]) == 0
    assert "recorded done" in capsys.readouterr().out
    taken = await night()
    assert taken[0] == "done" and len(taken) == 2  # reported in a sub-folder, still first
