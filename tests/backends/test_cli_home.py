"""Nothing a CLI member sends persists outside the call: the member's home holds no prompt.

Issue 11 item 17: run as the target, the copilot member kept every call's session (prompt
included) in its member home, and codex left sqlite files there. The fake CLIs here keep
state the way the real ones do (a session folder and a database file holding the prompt,
in the directory their home variable names) and insist on a login file; after answered,
timed-out and cancelled calls, neither the member's home nor the user's home nor our
scratch space holds the prompt, and the login is still there.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from skillopt.backends.base import CompletionRequest, Role
from skillopt.backends.cli.common import CliKind, CliSpec
from skillopt.backends.cli.member import CliBackend
from skillopt.errors import BackendTimeoutError
from support.fake_cli import FakeCli, write_fake_cli

MARK = "PROMPT-THAT-MUST-NOT-PERSIST-7d1f"
LOGIN = {CliKind.CODEX: "auth.json", CliKind.CLAUDE: ".credentials.json",
         CliKind.COPILOT: "config.json"}  # fmt: skip
ANSWER = {
    CliKind.CODEX: '{"type": "item.completed", "item": {"type": "agent_message", "text": "ok"}}',
    CliKind.CLAUDE: '{"type": "result", "is_error": false, "result": "ok"}',
    CliKind.COPILOT: '{"type": "assistant.message", "data": {"content": "ok"}}',
}


def holding(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def backend(fake: FakeCli, kind: CliKind, tmp_path: Path, *, isolated: bool) -> CliBackend:
    home = tmp_path / "member-home" if isolated else None
    spec = CliSpec(kind=kind, name=f"{kind}-m", executable=str(fake.path), timeout=30,
                   isolated_home=isolated, home_dir=home)  # fmt: skip
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "user")}
    return CliBackend(spec, environ=environ, scratch_root=tmp_path / "scratch")


def login_dir(kind: CliKind, tmp_path: Path, *, isolated: bool) -> Path:
    if isolated:
        return tmp_path / "member-home"
    return tmp_path / "user" / {CliKind.CODEX: ".codex", CliKind.CLAUDE: ".claude",
                                CliKind.COPILOT: ".copilot"}[kind]  # fmt: skip


async def cancel_once_hanging(member: CliBackend, fake: FakeCli) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(member.complete, CompletionRequest(role=Role.TARGET, prompt=f"{MARK} c"))
        with anyio.fail_after(60):
            # another process's file: no event to wait on; it has written its state, hangs
            while not fake.child_pid_path.exists():  # noqa: ASYNC110
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("isolated", [True, False], ids=["member_home", "user_home"])
@pytest.mark.parametrize("kind", list(CliKind), ids=[k.value for k in CliKind])
async def test_no_prompt_persists_after_answers_timeouts_and_cancels(
    kind: CliKind, isolated: bool, tmp_path: Path
) -> None:
    login = login_dir(kind, tmp_path, isolated=isolated)
    login.mkdir(parents=True)
    (login / LOGIN[kind]).write_text('{"token": "login"}')
    fake = write_fake_cli(tmp_path / "bin", kind.value, stdout=ANSWER[kind] + "\n",
                          last_message="ok", login_file=LOGIN[kind], write_state=True)  # fmt: skip
    member = backend(fake, kind, tmp_path, isolated=isolated)
    for i in range(2):
        done = await member.complete(CompletionRequest(role=Role.TARGET, prompt=f"{MARK} {i}"))
        assert done.text == "ok"
    fake.update(hang=True)
    with pytest.raises(BackendTimeoutError):
        await member.complete(CompletionRequest(role=Role.TARGET, prompt=f"{MARK} t", timeout=1))
    fake.child_pid_path.unlink()
    await cancel_once_hanging(member, fake)
    assert len(fake.calls()) == 4 and all(MARK in c["stdin"] for c in fake.calls())
    for root in (tmp_path / "user", tmp_path / "member-home", tmp_path / "scratch"):
        if root.exists():
            assert holding(root, MARK) == [], root
    assert (login / LOGIN[kind]).read_text() == '{"token": "login"}'
    assert list((tmp_path / "scratch").iterdir()) == []
    await member.aclose()


@pytest.mark.slow
async def test_a_night_on_a_cli_member_leaves_no_prompt_in_its_home(tmp_path: Path) -> None:
    from skillopt.backends.pool import BackendPool
    from skillopt.config import PoolConfig
    from skillopt_sleep.demo import prepare_demo
    from skillopt_sleep.harvest import SELF_MARKER
    from skillopt_sleep.night.entry import run_night

    setup = prepare_demo(tmp_path / "demo")
    home = tmp_path / "member-home"
    home.mkdir()
    (home / "auth.json").write_text('{"token": "login"}')
    fake = write_fake_cli(tmp_path / "bin", "codex", stdout=ANSWER[CliKind.CODEX] + "\n",
                          last_message='{"score": 1.0}', login_file="auth.json",
                          write_state=True)  # fmt: skip
    member = {"kind": "codex", "name": "cx", "executable": str(fake.path), "isolated_home": True,
              "home_dir": str(home), "max_concurrency": 4}  # fmt: skip
    pool_cfg = PoolConfig.model_validate(
        {"members": [member], "roles": {"target": ["cx"], "optimizer": ["cx"]}}
    )
    async with BackendPool.from_config(pool_cfg) as pool:
        outcome = await run_night(setup.config, project=setup.project, pool=pool)
    assert outcome.run_dir is not None and len(fake.calls()) > 20
    assert all(SELF_MARKER in c["stdin"] for c in fake.calls())
    assert holding(home, SELF_MARKER) == [] and holding(tmp_path / "bin", "skillopt:self") != []
    assert sorted(p.name for p in home.iterdir()) == ["auth.json"]
