"""How many prompts, and how many sittings, a first handoff night asks (issue 23).

A handoff night (``[pool] kind = "handoff"``) calls no model: it stops at the end of each
stage that needs answers, exit 75, with the prompts in the project's handoff directory.
This benchmark plays the user's agent and counts what it is asked:

- **lift**: the lift world (``bench/lift_world``: 24 recurring tasks in ~100 Claude Code and
  Codex sessions, the LLM miner on), black-box through the CLI (``python -m skillopt_sleep
  once --json`` under a fresh HOME); each prompt of ``pending.json`` is answered by the lift
  world's model from the prompt text alone, as an agent reading ``PROMPTS.md`` would.
- **demo**: the bundled demo project (the heuristic miner: the mock world cannot mine), in
  process; each prompt is answered with the reply the mock gave the same prompt in the same
  night run on a recording mock pool (``tests/support/handoff_agent.py``).

Per sitting it prints the stage the night stopped after and the prompts it asked; then the
totals and the night's result.

``--wait`` (demo only) measures waiting mode (``once --handoff --wait``) instead: one run of
the night while the agent answers each prompt as ``pending.json`` lists it; it prints the
runs it took (one sitting), the prompts, how many times the agent found new prompts waiting,
and the wall time.

    .venv/bin/python bench/handoff.py [--world lift|demo|both] [--quick] [--seed 7] [--json]
    .venv/bin/python bench/handoff.py --world demo --wait
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lift import SEED_MEMORY, SEED_SKILL  # noqa: E402
from lift_world.history import write_history  # noqa: E402
from lift_world.model import WorldModel  # noqa: E402

MAX_SITTINGS = 60


@dataclass
class Count:
    world: str
    sittings: list[dict[str, Any]] = field(default_factory=list)
    result: str = ""
    detail: str = ""

    @property
    def prompts(self) -> int:
        return sum(int(s["prompts"]) for s in self.sittings)


def lift(args: argparse.Namespace, root: Path) -> Count:
    home = root / "home"
    project = home / "work" / "shop-api"
    per_task, chatter = ((1, 2), 4) if args.quick else ((3, 5), 14)
    write_history(home, project, now=datetime.now(UTC), seed=args.seed, per_task=per_task,
                  noise=chatter)  # fmt: skip
    from skillopt_sleep.config import managed_skill_name

    skill = home / ".claude" / "skills" / managed_skill_name(project) / "SKILL.md"
    skill.parent.mkdir(parents=True, exist_ok=True)
    skill.write_text(SEED_SKILL, encoding="utf-8")
    (project / "CLAUDE.md").write_text(SEED_MEMORY, encoding="utf-8")
    config = home / ".config" / "skillopt" / "sleep.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[sources]\nlookback_hours = 0\n\n[pool]\nkind = "handoff"\n')
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}  # fmt: skip
    model = WorldModel(world_seed=args.seed)
    count = Count(world="lift")
    for _ in range(MAX_SITTINGS):
        done = subprocess.run(
            [sys.executable, "-m", "skillopt_sleep", "once", "--project", str(project), "--json"],
            cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            timeout=900, check=False,
        )  # fmt: skip
        out = json.loads(done.stdout)
        if done.returncode != 75:
            count.result = f"exit {done.returncode}: {out.get('result')}"
            count.detail = str(out.get("reason") or out.get("message") or "")[:200]
            return count
        where = Path(out["handoff"]["dir"])
        rows = json.loads((where / "pending.json").read_text())["prompts"]
        for row in rows:
            answer = model.answer(row["prompt"])
            (where / row["answer_file"]).write_text(answer + "\n", encoding="utf-8")
        count.sittings.append(_sitting(out["failed_stage"], rows))
    count.result = f"still waiting after {MAX_SITTINGS} sittings"
    return count


def demo(root: Path, *, wait: bool = False) -> Count:
    import anyio

    from skillopt.backends.open import open_completer
    from skillopt_sleep.demo import prepare_demo
    from skillopt_sleep.handoff import as_handoff, handoff_dir
    from skillopt_sleep.night.entry import run_night
    from skillopt_sleep.night_end import RunStatus
    from support.handoff_agent import RecordingMock, answer_pending, recording_pool

    setup = prepare_demo(root)
    night = setup.config.night.model_copy(update={"llm_mine": False})
    cfg = setup.config.model_copy(update={"night": night})
    mock = RecordingMock()

    async def reference() -> None:
        async with open_completer(recording_pool(mock)) as stack:
            mocked = cfg.model_copy(update={"state_dir": root / "mock-state"})
            await run_night(mocked, project=setup.project, pool=stack)

    anyio.run(reference)
    handoff = as_handoff(cfg)
    where = handoff_dir(handoff, setup.project)
    if wait:
        return anyio.run(_demo_waiting, handoff, setup.project, where, mock.replies)
    count = Count(world="demo")
    for _ in range(MAX_SITTINGS):
        outcome = anyio.run(lambda: run_night(handoff, project=setup.project))
        if outcome.status is not RunStatus.WAITING:
            count.result = f"{outcome.status.value}: {outcome.result.value}"
            count.detail = f"held-out {outcome.baseline} -> {outcome.candidate}"
            return count
        rows = json.loads((where / "pending.json").read_text())["prompts"]
        answer_pending(where, mock.replies)
        count.sittings.append(_sitting(outcome.failed_stage, rows))
    count.result = f"still waiting after {MAX_SITTINGS} sittings"
    return count


async def _demo_waiting(handoff: Any, project: Path, where: Path, replies: dict[str, str]) -> Count:
    """One waiting night, answered by an agent that looks at ``pending.json`` every 50 ms."""
    import time

    import anyio

    from skillopt.backends.handoff import answer_path, read_pending, write_answer
    from skillopt_sleep.handoff import bind_handoff
    from skillopt_sleep.night.entry import run_night

    count = Count(world="demo --wait")
    done = anyio.Event()

    async def agent() -> None:
        while not done.is_set():
            fresh = [p for p in read_pending(where) if not answer_path(where, p.id).exists()]
            for p in fresh:
                write_answer(where, p.id, replies[p.id])
            if fresh:
                rows = [{"role": p.role, "stage": p.stage} for p in fresh]
                count.sittings.append(_sitting("(waiting)", rows))
            await anyio.sleep(0.05)

    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent)
        outcome = await run_night(bind_handoff(handoff, project, wait=600), project=project)
        done.set()
    count.result = f"{outcome.status.value}: {outcome.result.value} in one run"
    count.detail = (f"held-out {outcome.baseline} -> {outcome.candidate}; "
                    f"{time.monotonic() - started:.1f}s wall")  # fmt: skip
    return count


def _sitting(stage: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    kinds = Counter(f"{r['role']}/{r['stage']}" for r in rows)
    return {"after": stage, "prompts": len(rows), "kinds": dict(sorted(kinds.items()))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", choices=("lift", "demo", "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="a smaller lift history")
    parser.add_argument("--seed", type=int, default=7, help="lift world seed")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--wait", action="store_true", help="demo: measure waiting mode")
    args = parser.parse_args(argv)
    from skillopt.logging import configure_logging

    configure_logging(level="WARNING", stream=sys.stderr)
    counts = []
    with tempfile.TemporaryDirectory(prefix="skillopt-handoff-bench-") as tmp:
        if args.world in ("demo", "both"):
            counts.append(demo(Path(tmp) / "demo", wait=args.wait))
        if args.world in ("lift", "both"):
            counts.append(lift(args, Path(tmp) / "lift"))
    if args.json:
        print(json.dumps([{**asdict(c), "prompts": c.prompts} for c in counts], indent=2))
        return 0
    for c in counts:
        if c.world.endswith("--wait"):
            print(
                f"{c.world}: 1 sitting, {c.prompts} prompt(s) found waiting in "
                f"{len(c.sittings)} look(s) at pending.json; {c.result} ({c.detail})"
            )
            continue
        print(f"{c.world}: {len(c.sittings)} sitting(s), {c.prompts} prompt(s); then {c.result} "
              f"({c.detail})")  # fmt: skip
        for number, s in enumerate(c.sittings, 1):
            kinds = ", ".join(f"{k} {n}" for k, n in s["kinds"].items())
            print(f"  {number:2d}. after {s['after']:<24} {s['prompts']:4d}  ({kinds})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
