"""Every answered call is journalled as it lands, so a killed night's resume pays only for
the calls that never answered.

Before: rollouts were appended in batches of 64, so a SIGKILL lost up to 63 answered
rollouts and the resume paid for them again.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from skillopt.atomicio import AppendJournal, read_jsonl
from skillopt.backends.base import Completion, CompletionRequest, Usage
from skillopt.types import TaskRecord
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.replay import Docs, Job, Replayer
from support.fake_model_server import FakeModelServer, Reply, Request
from support.sleep_setup import openai_members, write_config
from support.world_http import world_reply

ATTEMPT = "# Project notes"
ANSWERED = 20  # attempts answered before the endpoint hangs and the night is killed
KEY_ENV = "SKILLOPT_TEST_FAKE_KEY"


def _pool(server: FakeModelServer) -> str:
    """No LLM mining (so every call is a rollout's); attempts and judging on their own
    members, so hanging attempts leave the judge its slots; no response cache (an
    in-memory cache would answer some repeats in one process and not in the other)."""
    members = openai_members(server, ("target", "judge"), key_env=KEY_ENV, timeout=120)
    return f"""llm_mine = false

[pool]
retry = {{ max_attempts = 1, base_delay = 0.0, max_delay = 0.0 }}
cache = {{ enabled = false }}
{members}
[pool.roles]
target = ["target"]
optimizer = ["judge"]
"""


def _env(config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLOPT_SLEEP__")}
    env.update(HOME=str(config.parent), **{KEY_ENV: "test-key-not-secret"})
    return env


def _argv(config: Path, project: Path) -> list[str]:
    return [sys.executable, "-m", "skillopt_sleep", "once", "--json",
            "--config", str(config), "--project", str(project)]  # fmt: skip


def _once(config: Path, project: Path) -> dict[str, object]:
    done = subprocess.run(
        _argv(config, project), capture_output=True, text=True, env=_env(config),
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, object] = json.loads(done.stdout)
    return out


@contextmanager
def _hanging_after(n: int) -> Iterator[tuple[FakeModelServer, threading.Event]]:
    """The world over HTTP, except that attempts after the first ``n`` never answer."""
    lock, seen, hung = threading.Lock(), [0], threading.Event()

    def rule(request: Request) -> Reply | None:
        if ATTEMPT not in request.user_text:
            return None
        with lock:
            seen[0] += 1
            if seen[0] <= n:
                return None
        hung.set()
        return Reply(hang=True)

    with FakeModelServer(reply_fn=world_reply, rule=rule, hang_seconds=600) as server:
        yield server, hung


def _wait_for_rows(path: Path, n: int, proc: subprocess.Popen[str]) -> int:
    """Rows on disk once ``n`` have landed; the limit (60 s) is far above the ~1 s it
    takes, and is reached only when answered rollouts wait in memory."""
    limit = time.monotonic() + 60
    rows = 0
    while time.monotonic() < limit and proc.poll() is None:
        rows = len(read_jsonl(path)) if path.exists() else 0
        if rows >= n:
            return rows
        time.sleep(0.05)
    return rows


@pytest.fixture
def setup(tmp_path: Path) -> DemoSetup:
    return prepare_demo(tmp_path)


@pytest.mark.slow
def test_a_killed_night_pays_only_for_calls_that_never_answered(setup: DemoSetup) -> None:
    with FakeModelServer(reply_fn=world_reply) as server:
        config = write_config(setup, pool=_pool(server))
        reference = _once(config, setup.project)
        full = len(server.requests)
    shutil.rmtree(setup.state_dir)

    with _hanging_after(ANSWERED) as (server, hung):
        config = write_config(setup, pool=_pool(server))
        proc = subprocess.Popen(
            _argv(config, setup.project), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=_env(config),
        )  # fmt: skip
        try:
            assert hung.wait(120), "the night never reached its rollouts"
            (run_dir,) = (setup.state_dir / "projects").glob("*/runs/*")
            rows = _wait_for_rows(run_dir / "rollouts.jsonl", ANSWERED, proc)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=60)
        answered = sum(1 for r in server.requests if ATTEMPT not in r.user_text) + ANSWERED
    assert rows == ANSWERED, f"{rows} of {ANSWERED} answered rollouts were on disk at the kill"

    with FakeModelServer(reply_fn=world_reply) as server:
        config = write_config(setup, pool=_pool(server))
        resumed = _once(config, setup.project)
        paid = len(server.requests)
    assert resumed["resumed"] is True and resumed["run_dir"] == str(run_dir)
    assert paid == full - answered, (paid, full, answered)
    report = json.loads((run_dir / "report.json").read_text())
    assert report["reused_rollouts"] >= ANSWERED
    assert (resumed["baseline"], resumed["candidate"], resumed["result"]) == (
        reference["baseline"], reference["candidate"], reference["result"],
    )  # fmt: skip


def test_the_journal_hands_each_line_over_at_once_and_fsyncs_by_time(tmp_path: Path) -> None:
    now = [0.0]
    journal = AppendJournal(tmp_path / "j.jsonl", sync_every=1.0, clock=lambda: now[0])
    journal.append([{"n": 1}])
    assert read_jsonl(tmp_path / "j.jsonl") == [{"n": 1}]  # readable before any fsync
    assert journal.unsynced
    journal.append([{"n": 2}])
    assert journal.unsynced  # a second line within the second is not fsynced on its own
    now[0] = 1.5
    journal.append([{"n": 3}])
    assert not journal.unsynced  # a second later, the append fsyncs everything so far
    journal.append([{"n": 4}])
    journal.sync()
    assert not journal.unsynced
    assert [r["n"] for r in read_jsonl(tmp_path / "j.jsonl")] == [1, 2, 3, 4]


def test_the_journal_cuts_a_torn_tail_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"n": 1}\n{"n": 2, "tor')
    AppendJournal(path).append([{"n": 3}])
    assert [r["n"] for r in read_jsonl(path)] == [1, 3]


class _Counting:
    """A model that answers every attempt "done" and every judge call with a score."""

    def __init__(self) -> None:
        self.stages: list[str] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        self.stages.append(request.stage)
        text = '{"score": 1.0, "reason": "ok"}' if request.stage == "judge" else "done"
        return Completion(text=text, usage=Usage(completion_tokens=3), member="m", latency=0.0)


async def test_a_resume_reruns_failed_calls_and_judges_answers_again_without_a_new_attempt() -> (
    None
):
    tasks = [TaskRecord(id=f"t{i}", intent=f"do {i}") for i in range(3)]
    docs = Docs(skill="s", memory="m")
    jobs = [Job(task=t, docs=docs) for t in tasks]
    earlier = [
        {"key": jobs[0].key, "task_id": "t0", "response": "done", "hard": 1.0, "soft": 1.0},
        {"key": jobs[1].key, "task_id": "t1", "error": "RetryableBackendError: 500"},
        {"key": jobs[2].key, "task_id": "t2", "response": "kept answer",
         "error": "judge: NoHealthyMemberError: every member is open"},
    ]  # fmt: skip
    model = _Counting()
    replayer = Replayer(pool=model, marker="x")
    assert replayer.preload(earlier) == 1
    results = await replayer.run(jobs)
    assert sorted(model.stages) == ["judge", "judge", "rollout"]
    assert [r.error for r in results] == ["", "", ""]
    assert results[2].response == "kept answer"  # the answer was not asked for again
