"""A poison transcript line (too deep, undecodable, unencodable, odd shape) costs that line only.

Issue 11 item 2: one line nested 100,000 levels deep made `harvest`, `once` and every later
night die with a RecursionError. Each hostile line here is put first and last in one demo
session; `harvest` (in-process CLI) and `once` (a real subprocess) must still see every
session, count the line, and the poisoned session's other lines must still count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from skillopt_sleep.cli import main
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.harvest import SourceKind, SourceSpec, harvest
from support.sleep_setup import write_config
from support.transcripts import Turn, write_claude_session, write_codex_session

N_DEMO_SESSIONS = 16
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _user(content: str) -> bytes:
    return json.dumps({"type": "user", "message": {"role": "user", "content": content}}).encode()


INVALID_UTF8 = _user("caf\udce9 fix the login page").replace(b"\\udce9", b"\xe9")
DEEP = b"[" * 100_000 + b"]" * 100_000
POISON: dict[str, tuple[bytes, str]] = {
    # name: (line, the diagnostics counter it must land in)
    "nested_100k_arrays": (DEEP, "malformed_lines"),
    "nested_5k_objects": (b'{"a":' * 5000 + b"1" + b"}" * 5000, "malformed_lines"),
    "lone_surrogate": (_user("fix the login \ud800 bug"), "invalid_utf8_lines"),  # an escape
    "invalid_utf8": (INVALID_UTF8, "invalid_utf8_lines"),
    "offset_past_year_9999": (b'{"timestamp": "9999-12-31T23:59:59-23:59"}', ""),
    "offset_before_year_1": (b'{"timestamp": "0001-01-01T00:00:00+23:59"}', ""),
    "nul_in_cwd": (b'{"cwd": "/tmp/a\\u0000b"}', ""),
    "utf16": ('{"type": "user"}'.encode("utf-16"), "malformed_lines"),
}


@pytest.fixture
def setup(tmp_path: Path) -> DemoSetup:
    return prepare_demo(tmp_path)


def _poison(setup: DemoSetup, line: bytes) -> Path:
    """Put ``line`` first and last in one demo session (its mtime kept)."""
    transcript = sorted((setup.claude_home / "projects").rglob("*.jsonl"))[0]
    stat = transcript.stat()
    transcript.write_bytes(line + b"\n" + transcript.read_bytes() + line + b"\n")
    os.utime(transcript, (stat.st_atime, stat.st_mtime))
    return transcript


@pytest.mark.parametrize("name", sorted(POISON))
def test_harvest_cli_counts_and_skips_a_poison_line(
    name: str, setup: DemoSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    line, counter = POISON[name]
    _poison(setup, line)
    cfg = str(write_config(setup))
    code = main(["harvest", "--config", cfg, "--project", str(setup.project), "--no-llm",
                 "--json", "--output", str(setup.root / "tasks.json")])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ok"]
    assert out["n_sessions"] == N_DEMO_SESSIONS
    diag = out["diagnostics"]["harvest"]
    assert diag["files_failed"] == 0
    if counter:
        assert diag[counter] == 2
    json.dumps(out, ensure_ascii=False).encode("utf-8")  # everything we keep is encodable


def test_replaced_bytes_keep_the_message_and_the_session(tmp_path: Path) -> None:
    claude, project = tmp_path / "claude", tmp_path / "proj"
    project.mkdir()
    path = write_claude_session(
        claude, cwd=project, session_id="s1", turns=[Turn(user="Fix the flaky login test")],
        start=T0,
    )  # fmt: skip
    raw = path.read_bytes().replace(b"flaky", b"fl\xffky").replace(b"login", b"log\\udc00in")
    path.write_bytes(raw)
    result = harvest(
        [SourceSpec(kind=SourceKind.CLAUDE_CODE, home=claude)], since=None, project=project, limit=5
    )
    (digest,) = result.digests
    assert digest.user_intents == ("Fix the fl\ufffdky log\ufffdin test",)
    assert result.diagnostics.invalid_utf8_lines == 1
    assert result.diagnostics.malformed_lines == 0


def test_codex_reader_survives_the_same_lines(tmp_path: Path) -> None:
    codex, project = tmp_path / "codex", tmp_path / "proj"
    project.mkdir()
    path = write_codex_session(
        codex, cwd=project, turns=[Turn(user="Add a retry to the uploader")], start=T0,
    )  # fmt: skip
    lines = [line for line, _ in POISON.values()]
    path.write_bytes(b"\n".join([*lines, path.read_bytes(), *lines]) + b"\n")
    result = harvest(
        [SourceSpec(kind=SourceKind.CODEX, home=codex)], since=None, project=project, limit=5
    )
    (digest,) = result.digests
    assert digest.user_intents == ("Add a retry to the uploader",)
    assert result.diagnostics.files_failed == 0


@pytest.mark.slow
def test_once_and_harvest_subprocesses_survive_the_deep_line(setup: DemoSetup) -> None:
    _poison(setup, DEEP)
    cfg = str(write_config(setup))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    common = ["--config", cfg, "--project", str(setup.project), "--json"]
    for argv in (["harvest", "--no-llm"], ["once"]):
        done = subprocess.run(
            [sys.executable, "-m", "skillopt_sleep", *argv, *common],
            capture_output=True, env=env, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
        out = json.loads(done.stdout)
        assert out["n_sessions"] == N_DEMO_SESSIONS
    run_dir = Path(out["run_dir"])
    diag = json.loads((run_dir / "diagnostics.json").read_text())
    assert diag["gather"]["harvest"]["malformed_lines"] == 2
