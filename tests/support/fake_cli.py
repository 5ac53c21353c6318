"""Small fake agent CLIs written as real executables, for argv/exit-code/hang/output tests.

:func:`write_fake_cli` writes ``<dir>/<name>`` (a Python script run by this interpreter) plus a
``<name>.json`` behaviour file beside it. Each run appends a record (argv, stdin, cwd, selected
env vars, pid) to ``<name>.calls.jsonl`` and then behaves as scripted:

* print ``stdout`` / ``stderr`` and exit with ``exit_code``;
* ``last_message``: write this text to the file given after ``-o`` (codex style);
  ``last_messages`` does the same with one text per call (the last one repeats);
* ``run_tools``: run these commands (argv lists, looked up on PATH) first, like an agent would;
* ``sleep`` seconds before answering; ``hang`` forever (after spawning a grandchild that also
  hangs and recording its pid, to prove the whole process group dies);
* ``huge_bytes``: write that many bytes to stdout;
* ``echo_stdin``: print the stdin it received (after ``stdout``);
* ``login_file``: refuse ("Not logged in", exit 1) unless this file is in its home (the
  directory its home variable names, else ``$HOME/.<name>``);
* ``write_state``: before anything else, keep the prompt in its home the way the real CLIs
  keep sessions (a session folder, a database file), like copilot and codex do.

Each call record also lists the home's entries (``home``: name -> link target or "").
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_SCRIPT = r"""#!{python}
import json, os, subprocess, sys, time
here = os.path.dirname(os.path.abspath(__file__))
name = os.path.basename(__file__)
cfg = json.load(open(os.path.join(here, name + ".json")))
stdin_text = "" if sys.stdin is None or sys.stdin.closed else sys.stdin.read()
record = {{
    "argv": sys.argv[1:],
    "stdin": stdin_text,
    "cwd": os.getcwd(),
    "pid": os.getpid(),
    "pgid": os.getpgid(0),
    "env": {{k: os.environ.get(k) for k in cfg["env_keys"]}},
}}
homes = {{"codex": "CODEX_HOME", "claude": "CLAUDE_CONFIG_DIR", "copilot": "COPILOT_HOME"}}
home = os.environ.get(homes.get(name, "")) or os.path.join(os.environ.get("HOME", here), "." + name)
def target(entry):
    path = os.path.join(home, entry)
    return os.readlink(path) if os.path.islink(path) else ""
record["home"] = {{e: target(e) for e in (os.listdir(home) if os.path.isdir(home) else [])}}
with open(os.path.join(here, name + ".calls.jsonl"), "a") as fh:
    fh.write(json.dumps(record) + "\n")
if cfg["login_file"] and not os.path.exists(os.path.join(home, cfg["login_file"])):
    sys.stderr.write("Error: Not logged in. Please run /login\n")
    sys.exit(1)
if cfg["write_state"]:
    session = os.path.join(home, "session-state", str(os.getpid()))
    os.makedirs(session, exist_ok=True)
    with open(os.path.join(session, "events.jsonl"), "w") as fh:
        fh.write(json.dumps({{"type": "user.message", "content": stdin_text}}) + "\n")
    with open(os.path.join(home, "state_5.sqlite"), "ab") as fh:
        fh.write(stdin_text.encode())
for cmd in cfg["run_tools"]:
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
if cfg["hang"]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    with open(os.path.join(here, name + ".child.pid"), "w") as fh:
        fh.write(str(child.pid))
    sys.stdout.write(cfg["stdout"]); sys.stdout.flush()
    time.sleep(3600)
if cfg["sleep"]:
    time.sleep(cfg["sleep"])
last = cfg["last_message"]
if cfg["last_messages"]:
    with open(os.path.join(here, name + ".calls.jsonl")) as fh:
        count = sum(1 for _ in fh)
    last = cfg["last_messages"][min(count, len(cfg["last_messages"])) - 1]
if last is not None and "-o" in sys.argv:
    with open(sys.argv[sys.argv.index("-o") + 1], "w") as fh:
        fh.write(last)
if cfg["huge_bytes"]:
    block = b"x" * 65536
    left = cfg["huge_bytes"]
    while left > 0:
        sys.stdout.buffer.write(block[: min(left, len(block))]); left -= len(block)
    sys.stdout.flush()
sys.stdout.write(cfg["stdout"])
if cfg["echo_stdin"]:
    sys.stdout.write(stdin_text)
sys.stderr.write(cfg["stderr"])
sys.exit(cfg["exit_code"])
"""


@dataclass
class FakeCli:
    path: Path
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    last_message: str | None = None
    last_messages: list[str] = field(default_factory=list)  # per call, the last one repeats
    run_tools: list[list[str]] = field(default_factory=list)
    sleep: float = 0.0
    hang: bool = False
    huge_bytes: int = 0
    echo_stdin: bool = False
    login_file: str = ""
    write_state: bool = False
    env_keys: list[str] = field(default_factory=list)

    @property
    def calls_path(self) -> Path:
        return self.path.with_name(self.path.name + ".calls.jsonl")

    @property
    def child_pid_path(self) -> Path:
        return self.path.with_name(self.path.name + ".child.pid")

    def calls(self) -> list[dict[str, Any]]:
        if not self.calls_path.exists():
            return []
        return [json.loads(line) for line in self.calls_path.read_text().splitlines() if line]

    def update(self, **changes: Any) -> FakeCli:
        """Change behaviour in place (rewrites the behaviour file)."""
        for key, value in changes.items():
            setattr(self, key, value)
        self._write_config()
        return self

    def _write_config(self) -> None:
        data = asdict(self)
        data.pop("path")
        self.path.with_name(self.path.name + ".json").write_text(json.dumps(data))


DEFAULT_ENV_KEYS = [
    "CODEX_HOME",
    "CLAUDE_CONFIG_DIR",
    "COPILOT_HOME",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
    "COPILOT_PROVIDER_BASE_URL",
    "COPILOT_PROVIDER_API_KEY",
    "COPILOT_OFFLINE",
    "COPILOT_AUTO_UPDATE",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "CLAUDE_CODE_MAX_RETRIES",
    "DISABLE_AUTOUPDATER",
    "PATH",
]


def write_fake_cli(directory: Path, name: str, **behaviour: Any) -> FakeCli:
    """Write an executable fake CLI called ``name`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(_SCRIPT.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    behaviour.setdefault("env_keys", list(DEFAULT_ENV_KEYS))
    fake = FakeCli(path=path, **behaviour)
    fake._write_config()
    return fake


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        status = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return status != "Z"


def wait_dead(pid: int, within: float = 60.0) -> bool:
    """True once ``pid`` is gone; SIGKILL of a group is delivered asynchronously."""
    deadline = time.monotonic() + within
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def codex_events(answer: str) -> str:
    """codex ``--json`` events of a run that read task.md and answered ``answer``."""
    events = [
        {"type": "thread.started"},
        {
            "type": "item.completed",
            "item": {"type": "command_execution", "command": "cat task.md", "exit_code": 0},
        },
        {"type": "item.completed", "item": {"type": "agent_message", "text": answer}},
        {"type": "turn.completed", "usage": {"input_tokens": 40, "output_tokens": 5}},
    ]
    return "".join(json.dumps(e) + "\n" for e in events)
