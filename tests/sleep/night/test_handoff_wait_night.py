"""Handoff waiting mode end to end: a night started with ``--wait`` is answered in one run
by an agent working as the prompts appear; patience spent stops it as without waiting, and
a stopped waiting night resumes with the answers given meanwhile."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from skillopt.backends.handoff import PENDING_NAME, answer_path, read_pending, write_answer
from skillopt.backends.open import open_completer
from skillopt_sleep.cli import main
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.handoff import as_handoff, bind_handoff, handoff_dir, live_night
from skillopt_sleep.night.entry import NightOutcome, run_night
from skillopt_sleep.night.outcome import EXIT_WAITING
from skillopt_sleep.night_end import RunStatus
from support.handoff_agent import RecordingMock, recording_pool, until
from support.sleep_setup import write_config

from .test_handoff_night import small, trials

AGENT_POLL = 0.05


async def mock_night(setup: DemoSetup, state: Path) -> tuple[NightOutcome, RecordingMock]:
    mock = RecordingMock()
    async with open_completer(recording_pool(mock)) as stack:
        outcome = await run_night(
            small(setup.config).model_copy(update={"state_dir": state}),
            project=setup.project, pool=stack,
        )  # fmt: skip
    assert outcome.status is RunStatus.COMPLETE and outcome.accepted
    return outcome, mock


async def answer_as_they_appear(directory: Path, replies: dict[str, str], done: anyio.Event,
                                asked: set[str]) -> None:  # fmt: skip
    """The test agent: answer each prompt ``pending.json`` lists, as soon as it is listed."""
    while not done.is_set():
        for p in read_pending(directory):
            if not answer_path(directory, p.id).exists():
                write_answer(directory, p.id, replies[p.id])
                asked.add(p.id)
        await anyio.sleep(AGENT_POLL)


@pytest.mark.slow
async def test_a_waiting_night_is_answered_in_one_run_with_the_mock_nights_decisions(
    tmp_path: Path,
) -> None:
    setup = prepare_demo(tmp_path)
    reference, mock = await mock_night(setup, tmp_path / "mock-state")
    cfg = bind_handoff(as_handoff(small(setup.config)), setup.project, wait=60)
    where = handoff_dir(cfg, setup.project)
    asked: set[str] = set()
    done = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer_as_they_appear, where, mock.replies, done, asked)
        outcome = await run_night(cfg, project=setup.project)
        done.set()
    assert outcome.status is RunStatus.COMPLETE, outcome.reason
    assert (outcome.result, outcome.accepted, outcome.baseline, outcome.candidate) == (
        reference.result, reference.accepted, reference.baseline, reference.candidate)  # fmt: skip
    assert outcome.run_dir is not None and reference.run_dir is not None
    assert trials(outcome.run_dir) == trials(reference.run_dir)
    assert asked == set(mock.replies)  # every prompt asked once, in one run
    assert not (where / PENDING_NAME).exists()


def test_patience_spent_exits_75_and_the_rerun_resumes(tmp_path: Path) -> None:
    setup = prepare_demo(tmp_path)
    config = write_config(setup, pool='llm_mine = false\n[pool]\nkind = "handoff"\n')
    argv = ["once", "--config", str(config), "--project", str(setup.project),
            "--log-level", "WARNING", "--wait", "0.3"]  # fmt: skip
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == EXIT_WAITING
    assert "waiting_for_answers" in out.getvalue()
    where = handoff_dir(setup.config, setup.project)
    doc = json.loads((where / PENDING_NAME).read_text())
    assert "live" not in doc and doc["prompts"] and doc["resume"].endswith("--wait 0.3")
    for p in read_pending(where):  # the first rollouts: any text reply is taken
        write_answer(where, p.id, "Done as asked.")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--json"]) == EXIT_WAITING
    said = json.loads(out.getvalue())
    assert said["resumed"] is True
    later = {p.id for p in read_pending(where)}
    assert later and not later & {p["id"] for p in doc["prompts"]}
    assert len(list((setup.state_dir / "projects").rglob("run.json"))) == 1


def test_wait_without_handoff_is_refused(tmp_path: Path) -> None:
    setup = prepare_demo(tmp_path)
    config = write_config(setup)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["once", "--config", str(config), "--project", str(setup.project),
                     "--wait", "--log-level", "WARNING"])  # fmt: skip
    assert code == 2 and "--handoff" in err.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
async def test_a_waiting_night_stopped_mid_wait_resumes_with_the_answers(
    tmp_path: Path, stop: signal.Signals
) -> None:
    """SIGTERM (or Ctrl-C) to a real ``once --handoff --wait`` process while it waits: it
    stops at once as interrupted (130) with its prompts written; answered meanwhile, the
    rerun goes on."""
    setup = prepare_demo(tmp_path)
    config = write_config(setup, pool='llm_mine = false\n[pool]\nkind = "handoff"\n')
    where = handoff_dir(setup.config, setup.project)
    argv = [sys.executable, "-m", "skillopt_sleep", "once", "--config", str(config),
            "--project", str(setup.project), "--log-level", "WARNING"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    async with await anyio.open_process([*argv, "--wait"], env=env) as night:
        with anyio.fail_after(60):
            await until(lambda: live_night(where) is not None and bool(read_pending(where)))
        assert live_night(where) == night.pid
        night.send_signal(stop)
        with anyio.fail_after(10):  # no drain: the default 30 s grace is not waited out
            assert await night.wait() == 130
    pending = read_pending(where)
    assert pending and live_night(where) is None
    assert {p.stage for p in pending} == {"rollout"}  # text replies: any answer is taken
    for p in pending:
        write_answer(where, p.id, "Done as asked.")
    done = await anyio.run_process([*argv, "--json"], env=env, check=False)
    said = json.loads(done.stdout)
    assert said["resumed"] is True and said["status"] == "waiting"
    assert not {p.id for p in pending} & {p.id for p in read_pending(where)}
