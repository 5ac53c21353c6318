"""`once`, `status` and `adopt` import only what they use.

With no HTTP member configured (the demo's mock pool) a night needs neither the openai
SDK nor its HTTP client, and no command but ``daemon`` and ``schedule`` needs the
scheduler. Each command runs in a real subprocess that reports its ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("openai", "httpx2", "apscheduler")
DRIVER = """
import json, sys
from skillopt_sleep.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print(json.dumps({{"code": code, "heavy": heavy}}), file=sys.__stderr__)
"""


def _heavy_modules(*argv: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-c", DRIVER.format(heavy=set(heavy)), *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["code"] == 0, done.stdout + done.stderr
    return list(report["heavy"])


@pytest.mark.slow
def test_demo_night_status_and_adopt_load_no_http_stack_and_no_scheduler(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert _heavy_modules("once", "--demo", "--state-dir", str(state), "--json") == []
    demo = ["--config", str(state / "demo" / "sleep.toml")]
    demo += ["--project", str(state / "demo" / "demo-project")]
    assert _heavy_modules("status", *demo, "--json") == []
    assert _heavy_modules("adopt", *demo, "--json") == []
    # status names the report pages; it does not render them
    assert _heavy_modules("status", *demo, "--json", heavy=("jinja2",)) == []


def test_help_of_a_command_loads_no_http_stack_and_no_scheduler() -> None:
    assert _heavy_modules("once", "--help") == []


SLOW_TO_IMPORT = ("pydantic", "skillopt.config", "skillopt_sleep.config", "structlog",
                  "apscheduler", "openai", "httpx2", "importlib.metadata")  # fmt: skip
HELP_DRIVER = """
import contextlib, io, json, pkgutil, sys
from skillopt_sleep import commands
from skillopt_sleep.cli import main
verbs = [i.name.removesuffix("_cmd").replace("_", "-")
         for i in pkgutil.iter_modules(commands.__path__) if not i.name.startswith("_")]
print(json.dumps(verbs))
for verb in verbs:
    before = set(sys.modules)
    with contextlib.redirect_stdout(io.StringIO()):
        code = main([verb, "--help"])
    slow = sorted(m for m in {slow!r} if m in sys.modules)
    print(json.dumps({{"verb": verb, "code": code, "slow": slow}}))
    for name in set(sys.modules) - before:
        del sys.modules[name]
"""


def test_help_of_every_command_imports_no_config_and_no_heavy_package() -> None:
    """Issue 32 item 6: `once --help` took 0.7 s, its parser importing the pydantic
    config through the handoff module (speed itself: bench/startup.py)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    driver = HELP_DRIVER.format(slow=SLOW_TO_IMPORT)
    done = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True,
                          env=env, timeout=120, check=True)  # fmt: skip
    verbs, *rows = (json.loads(line) for line in done.stdout.splitlines())
    assert {"once", "daemon", "schedule", "status"} <= set(verbs)
    assert [r["verb"] for r in rows] == verbs and all(r["code"] == 0 for r in rows)
    assert {r["verb"]: r["slow"] for r in rows if r["slow"]} == {}


LAZY_TYPES_DRIVER = """
import json, sys
import skillopt.backends.http.member
import openai
from openai.types import Completion, ChatModel  # names the SDK's types package re-exports
from openai.types.chat import ChatCompletion
loaded = sorted(m for m in sys.modules if m.startswith("openai.types."))
print(json.dumps({"loaded": loaded, "completion": Completion.__name__}))
"""


def test_the_http_stack_loads_only_the_openai_types_it_uses() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-c", LAZY_TYPES_DRIVER],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    report = json.loads(done.stdout)
    assert report["completion"] == "Completion"  # a re-exported name still resolves
    families = {name.split(".")[2] for name in report["loaded"]}
    assert "chat" in families
    assert not families & {"evals", "graders", "realtime", "fine_tuning", "beta"}
