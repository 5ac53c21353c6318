"""An agent-CLI target that fails once with a retryable error is re-run, not scored as wrong."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from skillopt.backends.cli.common import CliKind, CliSpec
from skillopt.backends.cli.member import CliBackend
from skillopt.backends.retry import RetryPolicy
from skillopt.errors import BackendAuthError, RetryableBackendError
from skillopt.trainer.demo import DemoWorld
from skillopt.trainer.envs.base import RolloutContext
from skillopt.trainer.envs.exec_cli import ExecQAEnvironment
from skillopt.trainer.envs.qa import QAEnvironment
from skillopt.types import Split

# A codex stand-in: the first FAIL_TIMES calls print FAIL_TEXT and exit 1, later ones answer.
_SCRIPT = """#!{python}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
count_file = os.path.join(here, "count")
n = int(open(count_file).read()) if os.path.exists(count_file) else 0
open(count_file, "w").write(str(n + 1))
sys.stdin.read()
if n < {fail_times}:
    sys.stderr.write({fail_text!r} + "\\n")
    sys.exit(1)
answer = json.dumps({{"final_response": "<answer>{answer}</answer>", "final_answer": "{answer}"}})
with open(sys.argv[sys.argv.index("-o") + 1], "w") as fh:
    fh.write(answer)
print(json.dumps({{"type": "item.completed", "item": {{"type": "agent_message", "text": answer}}}}))
"""


def flaky_codex(tmp_path: Path, *, fail_times: int, fail_text: str, answer: str) -> Path:
    path = tmp_path / "bin" / "codex"
    path.parent.mkdir(parents=True)
    path.write_text(
        _SCRIPT.format(
            python=sys.executable, fail_times=fail_times, fail_text=fail_text, answer=answer
        )
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def env_for(executable: Path) -> ExecQAEnvironment:
    spec = CliSpec(kind=CliKind.CODEX, name="agent", executable=str(executable), timeout=20)
    backend = CliBackend(spec, environ={"PATH": "/usr/bin:/bin"})
    return ExecQAEnvironment(
        QAEnvironment(), backend, retry=RetryPolicy(max_attempts=3, base_delay=0.01)
    )


def calls(executable: Path) -> int:
    return int((executable.parent / "count").read_text())


async def test_a_retryable_failure_is_run_again(tmp_path: Path) -> None:
    qa = QAEnvironment()
    item = next(i for i in qa.items(Split.TRAIN) if i.data["answers"] == ["yes"])
    codex = flaky_codex(
        tmp_path, fail_times=2, fail_text="ERROR: unexpected status 500 Internal Server Error",
        answer="yes",
    )  # fmt: skip
    ctx = RolloutContext(
        completer=DemoWorld(), timeout_s=20, max_output_tokens=64, workdir=tmp_path / "w"
    )
    result = await env_for(codex).rollout(item, "", ctx)
    assert result.hard == 1.0 and not result.error
    assert calls(codex) == 3


async def test_retries_are_bounded_and_auth_is_not_retried(tmp_path: Path) -> None:
    qa = QAEnvironment()
    item = qa.items(Split.TRAIN)[0]
    ctx = RolloutContext(
        completer=DemoWorld(), timeout_s=20, max_output_tokens=64, workdir=tmp_path / "w"
    )
    down = flaky_codex(
        tmp_path / "a", fail_times=99, fail_text="ERROR: stream disconnected", answer="x"
    )
    with pytest.raises(RetryableBackendError):
        await env_for(down).rollout(item, "", ctx)
    assert calls(down) == 3
    locked = flaky_codex(
        tmp_path / "b", fail_times=99, fail_text="ERROR: unexpected status 401 Unauthorized",
        answer="x",
    )  # fmt: skip
    with pytest.raises(BackendAuthError):
        await env_for(locked).rollout(item, "", ctx)
    assert calls(locked) == 1
