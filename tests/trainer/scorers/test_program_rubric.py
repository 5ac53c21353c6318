"""The scorers that call out: the rubric judge (the optimizer role, through a real pool) and
the program checker (a real subprocess in a real workspace)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import anyio
import pytest

from skillopt.backends.base import CompletionRequest, Role
from skillopt.errors import DataError
from skillopt.trainer.scorers.base import ScoreContext
from skillopt.trainer.scorers.program import NetworkIsolation, ProgramScorer, network_prefix
from skillopt.trainer.scorers.rubric import RubricScorer, parse_judge_reply
from support.trainer_fakes import ScriptedBackend, pool_of

ITEM = {"id": "r1", "question": "Why is the sky blue?", "rubric": ["mentions scattering",
        "mentions wavelength"]}  # fmt: skip


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ('{"score": 0.5, "reasoning": "half"}', 0.5),
        ('Here you go:\n```json\n{"score": "7/10"}\n```', 0.7),
        ('{"score": "80%"}', 0.8),
        ('{"score": 8}', 0.8),  # out of ten
        ('{"passed": true}', 1.0),
        ('{"verdict": "fail"}', 0.0),
        ('{"criteria": [{"criterion": "a", "met": true}, {"criterion": "b", "met": false}]}', 0.5),
    ],
)
def test_judge_replies_in_the_shapes_models_give(reply: str, score: float) -> None:
    assert parse_judge_reply(reply).score == pytest.approx(score)


async def test_the_rubric_reaches_the_optimizer_and_its_verdict_scores(tmp_path: Path) -> None:
    def judge(request: CompletionRequest) -> str:
        assert request.role is Role.OPTIMIZER and request.stage == "judge"
        assert "- mentions wavelength" in request.prompt and "Rayleigh" in request.prompt
        return 'Grading.\n{"criteria": [{"met": true}, {"met": true}], "reasoning": "both"}'

    backend = ScriptedBackend(reply=judge)
    ctx = ScoreContext(completer=pool_of(backend), timeout_s=5)
    verdict = await RubricScorer().score("<answer>Rayleigh scattering</answer>", ITEM, ctx)
    assert (verdict.hard, verdict.soft, verdict.reason) == (1.0, 1.0, "")
    partial = RubricScorer(pass_threshold=1.0)
    backend.reply = lambda _r: '{"score": 0.5, "reasoning": "no wavelength"}'
    half = await partial.score("<answer>scattering</answer>", ITEM, ctx)
    assert half.hard == 0.0 and half.soft == 0.5 and "no wavelength" in half.reason


async def test_a_judge_that_never_answers_usably_is_an_error_not_a_zero() -> None:
    backend = ScriptedBackend(reply=lambda _r: "I think it is fine.")
    verdict = await RubricScorer().score("x", ITEM, ScoreContext(completer=pool_of(backend)))
    assert verdict.error.startswith("judge_unusable") and len(backend.requests) == 2


async def test_an_item_without_a_rubric_is_named() -> None:
    backend = ScriptedBackend(reply=lambda _r: "{}")
    with pytest.raises(DataError, match=r"'r2'.*'rubric'"):
        await RubricScorer().score("x", {"id": "r2"}, ScoreContext(completer=pool_of(backend)))


# --------------------------------------------------------------------------- program


def write_checker(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "data" / "check.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("import json, os, sys, time, subprocess, socket\n" + body)
    return path


def ctx_for(tmp_path: Path) -> ScoreContext:
    workspace = tmp_path / "rollout" / "workspace"
    workspace.mkdir(parents=True)
    return ScoreContext(workspace=workspace, rollout_dir=tmp_path / "rollout")


@pytest.mark.parametrize(
    ("body", "hard", "soft", "reason"),
    [
        ("print('all rows right'); print('1')", 1.0, 1.0, ""),
        ("print('0.75')", 1.0, 0.75, ""),
        ("print('row 2 is wrong'); print('0.5'); sys.exit(1)", 0.0, 0.5, "row 2 is wrong"),
        ("sys.exit(3)", 0.0, 0.0, "exit 3"),
        ("print('not a score'); sys.exit(2)", 0.0, 0.0, "not a score"),
    ],
)
async def test_exit_code_and_stdout_are_the_score(
    tmp_path: Path, body: str, hard: float, soft: float, reason: str
) -> None:
    write_checker(tmp_path, body)
    scorer = ProgramScorer(checker="{python} {data_dir}/check.py", data_dir=str(tmp_path / "data"))
    verdict = await scorer.score("", {"id": "p1"}, ctx_for(tmp_path))
    assert (verdict.hard, verdict.soft) == (hard, soft)
    assert reason in verdict.reason and (verdict.reason == "") == (hard == 1.0)


async def test_the_checker_runs_in_the_workspace_with_a_minimal_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKILLOPT_TEST_TOKEN", "sk-should-not-leak")
    write_checker(
        tmp_path,
        "item = json.load(open(os.environ['SKILLOPT_ITEM']))\n"
        "assert 'SKILLOPT_TEST_TOKEN' not in os.environ, 'leaked'\n"
        "assert open('out.txt').read() == item['expected'], 'wrong output'\n"
        "print(os.getcwd())\n",
    )
    ctx = ctx_for(tmp_path)
    assert ctx.workspace is not None
    (ctx.workspace / "out.txt").write_text("42")
    item = {"id": "p2", "expected": "42", "checker": ["{python}", "{data_dir}/check.py"]}
    scorer = ProgramScorer(data_dir=str(tmp_path / "data"))
    verdict = await scorer.score("", item, ctx)
    assert verdict.hard == 1.0, verdict.reason
    assert str(ctx.workspace) in verdict.check
    assert not (tmp_path / "rollout" / "checker").exists()  # the item file is gone again


@pytest.mark.slow  # the checker gets 3 s to start its child before it is timed out
async def test_a_checker_past_its_time_is_killed_with_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    write_checker(
        tmp_path,
        "child = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(300)\n",
    )
    scorer = ProgramScorer(checker="{python} {data_dir}/check.py", data_dir=str(tmp_path / "data"),
                           timeout_s=3.0, isolate_network=NetworkIsolation.OFF)  # fmt: skip
    verdict = await scorer.score("", {"id": "p3"}, ctx_for(tmp_path))
    assert verdict.hard == 0.0 and verdict.reason.startswith("checker_failed:")
    assert "timed out" in verdict.reason
    child = int(pid_file.read_text())
    with anyio.fail_after(30):  # the kill is sent; the child is gone once it is reaped
        while _alive(child):  # noqa: ASYNC110 - /proc has no event
            await anyio.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return not state.split(") ", 1)[1].startswith("Z")


async def test_an_item_without_a_checker_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"'p4'.*'checker'"):
        await ProgramScorer().score("", {"id": "p4"}, ctx_for(tmp_path))


async def test_the_checker_has_no_network_where_the_machine_allows_it(tmp_path: Path) -> None:
    if not await network_prefix(NetworkIsolation.AUTO):
        pytest.skip("this machine does not allow a private network namespace")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        write_checker(
            tmp_path,
            f"socket.create_connection(('127.0.0.1', {port}), timeout=5).close()\n"
            "print('reached')\n",
        )
        command = f"{sys.executable} {{data_dir}}/check.py"
        data = str(tmp_path / "data")
        isolated = await ProgramScorer(checker=command, data_dir=data).score(
            "", {"id": "p5"}, ctx_for(tmp_path)
        )
        os.rename(tmp_path / "rollout", tmp_path / "rollout-1")
        open_net = await ProgramScorer(
            checker=command, data_dir=data, isolate_network=NetworkIsolation.OFF
        ).score("", {"id": "p5"}, ctx_for(tmp_path))
    assert isolated.hard == 0.0  # the parent's loopback server is out of reach
    assert open_net.hard == 1.0 and "reached" in open_net.check
