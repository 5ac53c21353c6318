"""A night against the small real model, run as a user runs it: ``skillopt-sleep once`` in a
subprocess, with a config whose pool is the real model's server; what the server counted
during the night is read beside the night's own report."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from skillopt_sleep.config import managed_skill_name
from skillopt_sleep.demo import prepare_demo
from support.agent_sessions import write_copilot_cli_session
from support.real_model import RealModelServer, ServerStats
from support.transcripts import Turn, write_claude_session, write_codex_session

# A night the small model can finish in minutes on two busy cores: a handful of tasks, one
# sample and one round each; every gate setting stays the user's default.
NIGHT_TIMEOUT = 1200
MAX_CALLS = 80
# The estimate's revisions said before the gate's first trial (night/estimate_revision.py):
# once the first rollouts measured the noise, and once round 1's reflections proposed edits.
BEFORE_THE_GATE = ("the first rollouts", "round 1's reflections")


@dataclass(frozen=True, slots=True, kw_only=True)
class NightRun:
    """A finished ``once``: its exit code, output, report, and the server's count of it."""

    code: int
    stdout: str
    stderr: str
    report: dict[str, Any]
    run_dir: Path | None
    live: dict[Path, str]  # each live document's sha256 before the night
    served: ServerStats
    wall: float
    cpu: float  # the night process's CPU seconds (the model's server apart)
    server_cpu: float  # the model server's CPU seconds during the night

    def judge_verdicts(self) -> tuple[int, int]:
        """(verdicts asked, those whose first request's reply was usable). The judge stage's
        calls count every request, each retry of the pool included (its ``pool.retry``
        events of stage judge): the verdicts asked are the calls less the retries, and one
        unusable at its first request was retried from attempt 1 (every judge failure is
        retryable: an unusable reply, a transport error)."""
        judge = self.report.get("spend", {}).get("stages", {}).get("judge", {})
        calls = int(judge.get("calls", 0))
        retries = [e for e in self.events("pool.retry") if e.get("stage") == "judge"]
        asked = calls - len(retries)
        first_retried = sum(1 for e in retries if int(e.get("attempt", 0)) == 1)
        return asked, max(0, asked - first_retried)

    def estimated_calls(self) -> int:
        """The calls the night said it would make before the gate spent any: its estimate as
        last revised before the first trial (once the first rollouts measured the noise, or
        round 1's reflections the edits proposed: a night whose reflection proposes none
        runs no gate), else as said before its first call (0: none said). What it said before
        its first call is :meth:`first_estimate`."""
        detail = self.report.get("estimate_detail") or {}
        before_gate = [
            int(r["calls"]) for r in detail.get("revisions") or []
            if r.get("after") in BEFORE_THE_GATE
        ]  # fmt: skip
        return before_gate[-1] if before_gate else int(detail.get("calls", 0))

    def first_estimate(self) -> int:
        """The calls the night said it would make before its first one (0: none said); the
        high end of a range, when it said one (:meth:`first_floor`)."""
        return int((self.report.get("estimate_detail") or {}).get("calls", 0))

    def first_floor(self) -> int | None:
        """The low end of the range said before the first call (the night should reflection
        propose no edit the gate can try), None when a single figure was said."""
        floor = (self.report.get("estimate_detail") or {}).get("floor")
        return None if floor is None else int(floor)

    def first_holds(self, spent: int) -> bool:
        """Whether what was said before the first call holds ``spent`` within x2: a range
        from half its low end to twice its high end, a figure within x2 of it."""
        high = self.first_estimate()
        low = self.first_floor() or high
        return bool(spent and high) and low / 2 <= spent <= 2 * high

    def events(self, name: str) -> list[dict[str, Any]]:
        """The night's structured log events of that name (JSON lines on stderr)."""
        found = []
        for line in self.stderr.splitlines():
            if line.startswith("{") and f'"{name}"' in line:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("event") == name:
                    found.append(event)
        return found


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def night_config(
    server: RealModelServer,
    *,
    state_dir: Path,
    sources: str,
    max_tasks: int = 4,
    llm_mine: bool = True,
) -> str:
    """The TOML a user would write for a first try of a local model."""
    return "\n".join(
        [
            f"state_dir = {json.dumps(str(state_dir))}",
            "",
            "[sources]",
            sources,
            "lookback_hours = 0",
            "",
            "[night]",
            f"max_tasks = {max_tasks}",
            "dream_rollouts = 1",
            "rounds = 1",
            "edit_budget = 2",
            f"llm_mine = {str(llm_mine).lower()}",
            "",
            "[budget]  # a bound on the test's time whatever the model does",
            f"max_calls = {MAX_CALLS}",
            "",
            server.pool_toml(),
        ]
    )


def run_once(
    server: RealModelServer,
    *,
    config: Path,
    project: Path,
    live: list[Path],
    home: Path,
) -> NightRun:
    """``skillopt-sleep once --json`` in a subprocess; the server's count is the delta over it."""
    before_live = {p: sha256(p) for p in live}
    before = server.stats()
    started = datetime.now(UTC)
    cpu, server_cpu = _children_cpu(), server.cpu_seconds()
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-m", "skillopt_sleep.cli", "once", "--config", str(config),
         "--project", str(project), "--json", "--log-level", "WARNING"],
        capture_output=True, text=True, timeout=NIGHT_TIMEOUT, env=env, check=False,
    )  # fmt: skip
    wall = (datetime.now(UTC) - started).total_seconds()
    cpu, server_cpu = _children_cpu() - cpu, server.cpu_seconds() - server_cpu
    served = server.stats().since(before)
    out = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
    run_dir = Path(out["run_dir"]) if out.get("run_dir") else None
    report_file = run_dir / "report.json" if run_dir else None
    report = json.loads(report_file.read_text()) if report_file and report_file.is_file() else {}
    return NightRun(
        code=done.returncode,
        stdout=done.stdout,
        stderr=done.stderr,
        report=report,
        run_dir=run_dir,
        live=before_live,
        served=served,
        wall=wall,
        cpu=cpu,
        server_cpu=server_cpu,
    )


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def demo_night(server: RealModelServer, root: Path, *, llm_mine: bool = True) -> NightRun:
    """The bundled demo project (``once --demo``'s sessions, skill and memory), on the model;
    its tasks mined by the model, or (``llm_mine=False``) by the free heuristic miner."""
    setup = prepare_demo(root)
    sources = "\n".join(
        ['kinds = ["claude_code"]', f"claude_home = {json.dumps(str(setup.claude_home))}"]
    )
    config = root / "real-model.toml"
    config.write_text(
        night_config(server, state_dir=setup.state_dir, sources=sources, llm_mine=llm_mine)
    )
    live = [setup.config.live_skill_path(setup.project), setup.project / "CLAUDE.md"]
    return run_once(server, config=config, project=setup.project, live=live, home=root)


# What a user asked their agents over a few days: the same kinds of task come back.
ASKED: list[tuple[str, list[Turn]]] = [
    ("claude", [Turn(user="Write a commit message for the retry fix in src/http.py",
                     answer="fix: retry on 503", tools=("Bash",)),
                Turn(user="no, say why in the body too", answer="Added a body.")]),
    ("codex", [Turn(user="Write a commit message for the new --dry-run flag",
                    answer="feat: add --dry-run", tools=("shell",))]),
    ("copilot", [Turn(user="Add a unit test for parse_size in src/units.py",
                      answer="Added tests/test_units.py", tools=("edit",)),
                 Turn(user="the test must cover '10 MiB' too", answer="Covered.")]),
    ("claude", [Turn(user="Add a unit test for the CSV export of the report",
                     answer="Added a test.", tools=("Write",))]),
    ("codex", [Turn(user="Explain why the cache test is flaky",
                    answer="It depends on wall-clock time.")]),
    ("copilot", [Turn(user="Write a commit message for the cache test fix",
                      answer="test: freeze the clock")]),
]  # fmt: skip


def agents_night(server: RealModelServer, root: Path) -> NightRun:
    """A project whose user works with Claude Code, Codex and Copilot CLI: their sessions as
    each agent writes them on disk, harvested, mined and learned from."""
    home = root / "home"
    project = root / "shop-api"
    project.mkdir(parents=True)
    memory = project / "CLAUDE.md"
    memory.write_text("# shop-api\n\nRun `make test` before every commit.\n")
    start = datetime.now(UTC) - timedelta(hours=len(ASKED) + 1)
    for index, (agent, turns) in enumerate(ASKED):
        at = start + timedelta(hours=index)
        if agent == "claude":
            write_claude_session(home / ".claude", cwd=project, turns=turns, start=at)
        elif agent == "codex":
            write_codex_session(home / ".codex", cwd=project, turns=turns, start=at)
        else:
            write_copilot_cli_session(home / ".copilot", cwd=project, turns=turns, start=at)
    sources = "\n".join(
        [
            'kinds = ["claude_code", "codex", "copilot_cli"]',
            f"claude_home = {json.dumps(str(home / '.claude'))}",
            f"codex_home = {json.dumps(str(home / '.codex'))}",
            f"copilot_cli_home = {json.dumps(str(home / '.copilot'))}",
        ]
    )
    config = root / "real-model.toml"
    config.write_text(night_config(server, state_dir=root / "state", sources=sources))
    # a first night: the project's learned skill does not exist yet, and must not after it
    skill = home / ".claude" / "skills" / managed_skill_name(project) / "SKILL.md"
    live = [memory, skill]
    return run_once(server, config=config, project=project, live=live, home=home)
