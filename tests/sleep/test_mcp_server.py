"""`skillopt-sleep mcp` as a real subprocess, driven by the MCP SDK's own stdio client."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, TextIO

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from skillopt_sleep.cli import main
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.rundir import RunDir
from skillopt_sleep.state import project_dir
from support.sleep_setup import write_config

pytestmark = pytest.mark.slow
SRC = Path(__file__).resolve().parents[2] / "src"
CALL_TIMEOUT = 60.0  # a guard against a hung server; each call returns on its reply


@pytest.fixture
def night(tmp_path: Path) -> tuple[DemoSetup, Path, Path]:
    """A demo project after one night that staged a proposal; (setup, config, run dir)."""
    setup = prepare_demo(tmp_path)
    config = write_config(setup)
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["once", "--config", str(config), "--project", str(setup.project),
                     "--log-level", "WARNING"]) == 0  # fmt: skip
    (run,) = RunDir.list_runs(project_dir(setup.state_dir, setup.project) / "runs")
    return setup, config, run


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    """Where the server's stderr (its logs) goes."""
    with (tmp_path / "server.log").open("w") as handle:
        yield handle


@contextlib.asynccontextmanager
async def connect(config: Path, project: Path, errlog: TextIO) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "skillopt_sleep", "mcp", "--config", str(config), "--project", str(project)],
        env={"PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])},
        cwd=str(project),
    )
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> tuple[bool, Any]:
    """(is_error, structured result or the error text)."""
    result = await session.call_tool(tool, arguments)
    if result.is_error:
        return True, " ".join(getattr(c, "text", "") for c in result.content)
    return False, result.structured_content


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_agent_reads_the_night_and_adopts_only_when_confirmed(
    night: tuple[DemoSetup, Path, Path], errlog: TextIO
) -> None:
    setup, config, run = night
    skill = next(setup.claude_home.glob("skills/*/SKILL.md"))
    memory = setup.project / "CLAUDE.md"
    before = sha(skill), sha(memory)
    async with connect(config, setup.project, errlog) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == {"status", "latest_report", "proposal_diff", "adopt",
                              "handoff_next", "handoff_answer"}  # fmt: skip
        assert tools["adopt"].annotations and tools["adopt"].annotations.destructive_hint
        assert tools["status"].annotations and tools["status"].annotations.read_only_hint

        error, status = await call(session, "status")
        assert not error and status["nights_run"] == 1
        assert {p["name"] for p in status["pending_proposals"]} >= {"CLAUDE"}
        assert status["report_index"] and await anyio.Path(status["report_index"]).is_file()

        error, report = await call(session, "latest_report")
        assert not error and report["run_id"] == run.name and report["result"] == "accepted"
        assert report["learned"] and all(e["edit"] for e in report["learned"])
        assert report["tasks_improved"] and report["report_html"] == str(run / "report.html")

        error, diff = await call(session, "proposal_diff")
        assert not error and diff["run_id"] == run.name and diff["adoptable"]
        assert all(f"+- {e['edit']}" in diff["diff"] for e in report["learned"])

        error, text = await call(session, "adopt")
        assert error and "Nothing was adopted" in text and f'run_id="{run.name}"' in text
        error, text = await call(session, "adopt", confirm=True)  # which run? say it
        assert error and "Nothing was adopted" in text
        error, text = await call(session, "adopt", confirm=True, run_id=str(setup.root))
        assert error and "no run" in text  # only this project's runs, never a path
        assert (sha(skill), sha(memory)) == before

        error, done = await call(session, "adopt", confirm=True, run_id=run.name)
        assert not error, done
        assert {a["name"] for a in done["adopted"]} == {"CLAUDE", skill.parent.name}
        assert sha(memory) != before[1]
        for adopted in done["adopted"]:
            assert await anyio.Path(adopted["backup_path"]).is_file()

        error, text = await call(session, "adopt", confirm=True, run_id=run.name)
        assert error and "Nothing was adopted" in text  # receipts are final
        error, status = await call(session, "status")
        assert status["pending_proposals"] == []


async def test_adopt_over_mcp_keeps_the_pin_on_the_live_files(
    night: tuple[DemoSetup, Path, Path], errlog: TextIO
) -> None:
    setup, config, run = night
    skill = next(setup.claude_home.glob("skills/*/SKILL.md"))
    memory = setup.project / "CLAUDE.md"
    memory.write_text(memory.read_text() + "\nEdited by hand after the night.\n")
    before = sha(skill), sha(memory)
    async with connect(config, setup.project, errlog) as session:
        error, diff = await call(session, "proposal_diff", run_id=run.name)
        assert not error and not diff["adoptable"]
        assert {f["name"]: f["state"] for f in diff["files"]}["CLAUDE"] == "stale"
        error, text = await call(session, "adopt", confirm=True, run_id=run.name)
        assert error and "changed since staging" in text
    assert (sha(skill), sha(memory)) == before  # all or nothing: the skill was not touched


@pytest.fixture
def handoff(tmp_path: Path) -> tuple[DemoSetup, Path, list[str]]:
    """A demo project whose first handoff night waits for answers; (setup, config, argv)."""
    setup = prepare_demo(tmp_path)
    # (the heuristic miner: the first prompts are then the rollouts)
    config = write_config(setup, pool='llm_mine = false\n[pool]\nkind = "handoff"\n')
    argv = ["once", "--config", str(config), "--project", str(setup.project),
            "--log-level", "WARNING"]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 75
    return setup, config, argv


async def test_an_agent_answers_a_handoff_night_through_the_tools(
    handoff: tuple[DemoSetup, Path, list[str]], errlog: TextIO
) -> None:
    setup, config, argv = handoff
    answers = project_dir(setup.state_dir, setup.project) / "handoff" / "answers"
    async with connect(config, setup.project, errlog) as session:
        error, first = await call(session, "handoff_next")
        assert not error and first["number"] == 1 and first["remaining"] == first["of"] > 1
        assert first["prompt"] and first["format"] == "text" and first["stage"] == "rollout"
        error, text = await call(session, "handoff_answer", id="0" * 16, answer="hi")
        assert error and "no prompt" in text
        error, text = await call(session, "handoff_answer", id=first["id"], answer=" ")
        assert error and "empty" in text and not any(answers.glob("*.md"))
        for served in range(first["of"]):
            error, prompt = await call(session, "handoff_next")
            assert not error and prompt["remaining"] == first["of"] - served
            error, took = await call(
                session, "handoff_answer", id=prompt["id"], answer="Done: [tests: 12 passed]"
            )
            assert not error and took["remaining"] == first["of"] - served - 1
        error, done = await call(session, "handoff_next")
        assert not error and done["remaining"] == 0 and "once --config" in done["message"]
    assert len(list(answers.glob("*.md"))) == first["of"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    again = await anyio.run_process([sys.executable, "-m", "skillopt_sleep", *argv], env=env,
                                    check=False)  # fmt: skip
    # resumed: the rollouts are answered, their judging waits now
    assert again.returncode == 75 and b"(resumed)" in again.stdout


async def test_one_agent_session_answers_a_waiting_night_to_its_end(
    tmp_path: Path, errlog: TextIO
) -> None:
    """``once --handoff --wait`` runs while the agent loops handoff_next / handoff_answer:
    the night ends in that one run, as the same night on the mock backend did."""
    from skillopt.backends.open import open_completer
    from skillopt_sleep.config import load_sleep_config
    from skillopt_sleep.night.entry import run_night
    from support.handoff_agent import RecordingMock, recording_pool

    setup = prepare_demo(tmp_path)
    config = write_config(setup, pool='llm_mine = false\n[pool]\nkind = "handoff"\n')
    cfg = load_sleep_config(config).model_copy(update={"state_dir": tmp_path / "mock-state"})
    mock = RecordingMock()
    async with open_completer(recording_pool(mock)) as stack:
        reference = await run_night(cfg, project=setup.project, pool=stack)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    argv = [sys.executable, "-m", "skillopt_sleep", "once", "--config", str(config),
            "--project", str(setup.project), "--log-level", "WARNING", "--json",
            "--wait", "60"]  # fmt: skip
    answered: set[str] = set()
    async with await anyio.open_process(argv, env=env, stderr=errlog) as night:
        async with connect(config, setup.project, errlog) as session:
            with anyio.fail_after(30):  # the night names itself as it starts
                while not (await call(session, "handoff_next"))[1]["night_running"]:  # noqa: ASYNC110
                    await anyio.sleep(0.1)
            while True:
                error, served = await call(session, "handoff_next")
                assert not error, served
                if "id" in served:
                    error, took = await call(session, "handoff_answer", id=served["id"],
                                             answer=mock.replies[served["id"]])  # fmt: skip
                    assert not error, took
                    answered.add(served["id"])
                elif not served["night_running"]:
                    break
        assert night.stdout is not None
        out = b"".join([chunk async for chunk in night.stdout])
        assert await night.wait() == 0
    said = json.loads(out)
    assert said["status"] == "complete" and said["resumed"] is False
    assert (said["accepted"], said["baseline"], said["candidate"]) == (
        reference.accepted, reference.baseline, reference.candidate)  # fmt: skip
    assert answered == set(mock.replies)
