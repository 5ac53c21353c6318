"""The bundled demo: synthetic Claude Code sessions, a starting skill and memory, a mock pool.

:func:`prepare_demo` lays the demo out under a fresh directory (a project, a fake
``~/.claude`` with transcripts pointing at that project, a state directory) and returns a
:class:`SleepConfig` wired to the deterministic mock backend, so ``once --demo`` runs a
whole night offline in seconds.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from skillopt.atomicio import atomic_write_text
from skillopt.config import PoolConfig
from skillopt_sleep.config import SleepConfig

__all__ = ["DEMO_DIR", "DemoSetup", "demo_in", "demo_pool", "prepare_demo", "write_demo_config"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoSetup:
    root: Path
    project: Path
    claude_home: Path
    state_dir: Path
    config: SleepConfig


def _data(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _write_session(
    home: Path, project: Path, index: int, user: list[str], answer: str, start: datetime
) -> None:
    sid = str(uuid.UUID(int=index + 1))
    path = home / "projects" / str(project).replace("/", "-") / f"{sid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    base: dict[str, Any] = {"cwd": str(project), "sessionId": sid, "gitBranch": "main"}
    lines = []
    now = start
    for text in user:
        lines.append(
            {**base, "type": "user", "timestamp": _iso(now),
             "message": {"role": "user", "content": text}}
        )  # fmt: skip
        now += timedelta(minutes=2)
        lines.append(
            {**base, "type": "assistant", "timestamp": _iso(now),
             "message": {"role": "assistant", "content": [{"type": "text", "text": answer}]}}
        )  # fmt: skip
        now += timedelta(minutes=1)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    stamp = now.timestamp()
    os.utime(path, (stamp, stamp))


def demo_pool(*, latency: float = 0.0) -> PoolConfig:
    return PoolConfig.model_validate(
        {
            "members": [
                {"kind": "mock", "name": "mock", "max_concurrency": 16,
                 "options": {"latency": latency}}
            ],
            "roles": {"target": ["mock"], "optimizer": ["mock"]},
        }
    )  # fmt: skip


def prepare_demo(
    root: Path, *, now: datetime | None = None, state_dir: Path | None = None
) -> DemoSetup:
    """Lay out the demo under ``root`` (created if needed) and return its config; its
    state goes to ``state_dir`` (default ``<root>/state``)."""
    now = now or datetime.now(UTC)
    project = root / "demo-project"
    claude_home = root / "claude-home"
    state_dir = state_dir or root / "state"
    project.mkdir(parents=True, exist_ok=True)
    (project / "CLAUDE.md").write_text(_data("CLAUDE.md"), encoding="utf-8")
    setup = _setup(root, state_dir)
    skill_path = setup.config.live_skill_path(setup.project)
    skill_path.parent.mkdir(parents=True, exist_ok=True)
    skill_path.write_text(_data("SKILL.md"), encoding="utf-8")
    sessions = json.loads(_data("sessions.json"))["sessions"]
    start = now - timedelta(hours=len(sessions) + 1)
    for index, session in enumerate(sessions):
        _write_session(
            claude_home,
            project.resolve(),
            index,
            list(session["user"]),
            str(session["answer"]),
            start + timedelta(hours=index),
        )
    write_demo_config(setup)
    return setup


def _setup(root: Path, state_dir: Path) -> DemoSetup:
    claude_home = root / "claude-home"
    config = SleepConfig.model_validate(
        {
            "state_dir": str(state_dir),
            "sources": {"kinds": ["claude_code"], "claude_home": str(claude_home),
                        "lookback_hours": 0},
            "night": {"dream_rollouts": 3, "rounds": 2, "edit_budget": 4},
            "pool": demo_pool().model_dump(mode="json"),
        }
    )  # fmt: skip
    return DemoSetup(
        root=root,
        project=(root / "demo-project").resolve(),
        claude_home=claude_home,
        state_dir=state_dir,
        config=config,
    )


DEMO_DIR = "demo"


def demo_in(state_dir: Path | None) -> DemoSetup:
    """The demo a command runs: a fresh one in a new temp directory, or, with a state
    directory, the one kept there (``<state_dir>/demo``: laid out on first use, reused as
    it is after, adopted documents included), so demo nights can follow each other."""
    if state_dir is None:
        return prepare_demo(Path(tempfile.mkdtemp(prefix="skillopt-sleep-demo-")))
    state_dir = state_dir.expanduser().resolve()
    root = state_dir / DEMO_DIR
    if (root / "sleep.toml").is_file() and (root / "demo-project").is_dir():
        return _setup(root, state_dir)
    return prepare_demo(root, state_dir=state_dir)


def write_demo_config(setup: DemoSetup) -> Path:
    """``<root>/sleep.toml``, the demo's config as a file, so ``status``/``adopt`` can follow.

    Loads to the same settings as ``setup.config``.
    """
    night = setup.config.night
    text = "\n".join(
        [
            "# The skillopt-sleep demo's config (offline mock model; everything under this dir).",
            f"state_dir = {json.dumps(str(setup.state_dir))}",
            "",
            "[sources]",
            'kinds = ["claude_code"]',
            f"claude_home = {json.dumps(str(setup.claude_home))}",
            "lookback_hours = 0",
            "",
            "[night]",
            f"dream_rollouts = {night.dream_rollouts}",
            f"rounds = {night.rounds}",
            f"edit_budget = {night.edit_budget}",
            "",
            "[[pool.members]]",
            'kind = "mock"',
            'name = "mock"',
            "max_concurrency = 16",
            "options = { latency = 0.0 }",
            "",
            "[pool.roles]",
            'target = ["mock"]',
            'optimizer = ["mock"]',
            "",
        ]
    )
    path = setup.root / "sleep.toml"
    atomic_write_text(path, text)
    return path
