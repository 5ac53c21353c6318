"""`skillopt-sleep mcp` against a hostile client (issue 24, item 8): bad lines get JSON-RPC
errors, `adopt` takes only a boolean confirm, read tools write nothing, `project` is scoped."""

from __future__ import annotations

import hashlib
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import skillopt_sleep
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.staging import Proposal, ProposalKind, write_proposal
from skillopt_sleep.state import project_dir, runs_dir
from support.adoption import killed_adoption
from support.sleep_setup import write_config

_SRC = Path(skillopt_sleep.__file__).resolve().parents[1]
_HELLO = {
    "jsonrpc": "2.0",
    "id": "hello",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "hostile", "version": "1"},
    },
}
_READY = {"jsonrpc": "2.0", "method": "notifications/initialized"}


@pytest.fixture
def setup(tmp_path: Path) -> DemoSetup:
    return prepare_demo(tmp_path)


def _tool(ident: int, name: str, **arguments: Any) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}


def _exchange(setup: DemoSetup, lines: list[str], *extra: str) -> dict[Any, dict[str, Any]]:
    """Send ``lines`` to a real server; its replies by id, once each line that needs one has
    one (``None`` collects the id-less error replies, as a list under ``"null"``)."""
    expected = 0
    for line in lines:
        try:
            message = json.loads(line)
        except ValueError:
            expected += 1
            continue
        expected += int(not isinstance(message, dict) or "id" in message)
    command = [sys.executable, "-m", "skillopt_sleep", "mcp", "--config"]
    command += [str(write_config(setup)), "--project", str(setup.project), *extra]
    env = {**os.environ, "PYTHONPATH": str(_SRC)}
    replies: dict[Any, Any] = {"null": []}
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    ) as server:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(("\n".join(lines) + "\n").encode())
        server.stdin.flush()
        deadline = time.monotonic() + 60
        got, pending = 0, b""
        fd = server.stdout.fileno()
        while got < expected and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], deadline - time.monotonic())
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                break
            *whole, pending = (pending + chunk).split(b"\n")
            for line in whole:
                reply = json.loads(line)
                if reply.get("id") is None:
                    replies["null"].append(reply)
                else:
                    replies[reply["id"]] = reply
                got += 1
        server.stdin.close()
        server.wait(timeout=30)
    assert got == expected, replies
    return replies


def _session(*calls: dict[str, Any]) -> list[str]:
    return [json.dumps(_HELLO), json.dumps(_READY), *(json.dumps(c) for c in calls)]


def _text(reply: dict[str, Any]) -> tuple[bool, str]:
    result = reply["result"]
    return bool(result.get("isError")), " ".join(c.get("text", "") for c in result["content"])


def test_lines_that_are_not_json_rpc_get_their_error_reply(setup: DemoSetup) -> None:
    lines = ["this is not json", '{"jsonrpc": "2.0", "id": 7, "method": 5}', "[1, 2]", "{"]
    replies = _exchange(setup, [*lines, *_session(_tool(1, "status"))])
    assert replies[7]["error"]["code"] == -32600
    codes = sorted(r["error"]["code"] for r in replies["null"])
    assert codes == [-32700, -32700, -32600]
    assert "result" in replies[1]  # the server still serves


def test_adopt_takes_only_a_boolean_confirm(setup: DemoSetup) -> None:
    run = _staged(setup)
    live = setup.config.live_skill_path(setup.project)
    before = live.read_bytes()
    loose = ["true", 1, "yes", [True], {"value": True}]
    calls = [_tool(n, "adopt", confirm=c, run_id=run.name) for n, c in enumerate(loose)]
    replies = _exchange(setup, _session(*calls, _tool(9, "adopt", confirm=True, run_id=run.name)))
    for n in range(len(loose)):
        error, _ = _text(replies[n])
        assert error
    assert not _text(replies[9])[0] and live.read_bytes() != before


def test_latest_report_takes_a_night_number(setup: DemoSetup) -> None:
    replies = _exchange(setup, _session(_tool(1, "latest_report", night=1)))
    error, text = _text(replies[1])
    assert error and "no run '1'" in text and "validation" not in text


@pytest.mark.slow  # two servers
def test_a_project_outside_the_served_ones_is_refused(setup: DemoSetup, tmp_path: Path) -> None:
    other = prepare_demo(tmp_path / "other")
    calls = [_tool(n, tool, project=str(other.project)) for n, tool in enumerate(
        ("status", "latest_report", "proposal_diff"), start=1)]  # fmt: skip
    calls.append(_tool(4, "adopt", project=str(other.project), confirm=True, run_id="1"))
    replies = _exchange(setup, _session(*calls))
    for n in range(1, 5):
        error, text = _text(replies[n])
        assert error and "--also-project" in text
    replies = _exchange(
        setup, _session(_tool(1, "status", project=str(other.project))),
        "--also-project", str(other.project),
    )  # fmt: skip
    error, _ = _text(replies[1])
    assert not error


def _tree(*roots: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _staged(setup: DemoSetup) -> Path:
    """A night that staged a new skill and memory."""
    run = runs_dir(setup.state_dir, setup.project) / "20260101T000000Z-0001"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    skill, memory = setup.config.live_skill_path(setup.project), setup.project / "CLAUDE.md"
    write_proposal(
        run,
        [
            Proposal(name=skill.parent.name, live_path=skill, text="# new skill\n"),
            Proposal(
                name="CLAUDE", live_path=memory, text="# new memory\n", kind=ProposalKind.MEMORY
            ),
        ],
    )
    return run


def _half_adopted(setup: DemoSetup) -> Path:
    """A night whose adoption died after replacing the first of its two files."""
    run = _staged(setup)
    killed_adoption(run, setup.config.adopt_roots(setup.project), die_at=2)
    return run


def test_read_tools_write_nothing_and_report_a_half_done_adoption(setup: DemoSetup) -> None:
    run = _half_adopted(setup)
    state = project_dir(setup.state_dir, setup.project)
    before = _tree(state, setup.project, setup.claude_home)
    replies = _exchange(setup, _session(_tool(1, "status"), _tool(2, "proposal_diff")))
    assert _tree(state, setup.project, setup.claude_home) == before
    status = replies[1]["result"]["structuredContent"]
    assert status["unfinished_adoptions"] == [run.name] and "interrupted" in status["note"]
    error, text = _text(replies[2])
    assert error and run.name in text and "interrupted" in text


@pytest.fixture(autouse=True)
def _no_inherited_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("SKILLOPT_SLEEP__"):
            monkeypatch.delenv(name)
    yield
