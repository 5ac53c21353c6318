"""Multi-night lift: does the agent get better night after night, and never worse? (issue 10)

Builds the lift world (``bench/lift_world``: 24 recurring tasks, six house conventions of
different kinds, eight tasks needing two, three bait lookups that tempt an optimizer into a
harmful "just the bare value" rule), writes ~100 Claude Code and Codex sessions about it
over three weeks into a fresh HOME, and serves the world over real HTTP on 127.0.0.1 as
both the target and the optimizer model. Then, black-box through the CLI only
(``python -m skillopt_sleep once|adopt|status --json``, the default config file under the
fresh HOME, the state dir):

- **clean**: ``--nights`` chained nights from the seed documents, ``adopt`` after each, in
  ``--chains`` worlds (seeds ``--seed``, ``--seed``+1, ...; each its own history and HOME).
  A world seed changes the history and the wording the miner gives each task, hence the
  task ids and every hash split a night makes: one chain alone measures one draw of luck.
- **noisy**: ``--noisy-nights`` independent nights in the first world, each from the seed
  (state dir wiped, documents restored), with 20% of target answers flipped (seeded per
  night), ``adopt``.

Per night it prints the *true* score (share of the 24 tasks whose conventions are all in
the live skill + CLAUDE.md after adopt and the harmful rule absent: read from the files,
not from the night's report), the conventions adopted, whether the harmful rule was
proposed / adopted (a false accept), accepted/rejected edits from ``report.json``, the
night's model calls (and per task), and wall time; then wall, load average and CPU.

Mining: the night uses its LLM miner (the default for an HTTP pool, so calls include
mining); the world's miner names each session's recurring task in one canonical wording,
as a model asked for "the request as the developer would type it" would, and returns no
task for one-off sessions. ``--miner heuristic`` sets ``night.llm_mine = false`` instead
(the raw, varied wordings become tasks). ``sources.lookback_hours`` is 0 (all history, as
a user onboarding a project with history sets it); ``--lookback-hours 72`` is the default
window. Every other setting is the default; ``SKILLOPT_SLEEP__*`` variables in the
environment reach the nights (e.g. ``SKILLOPT_SLEEP__NIGHT__ROUNDS=2``).

Targets (issue 10), in every chain: clean >= 92% within 3 nights and 100% within 5,
harmful never adopted; noisy: 0 harmful accepts in 20 nights and mean true score >= 80%;
calls per night <= 1.5x today's for the same number of tasks (``TODAY_CALLS_PER_TASK``).
The verdicts are printed; the exit status is 0 unless the benchmark itself breaks.
A full run is 35 nights (~5 min on a loaded 2-core machine); ``--quick`` ~30 s.

``--chain-noise 0.2`` flips answers in the chained nights too (phase ``chain``): whether
learning compounds under noise. ``bench/lift_variants.py`` runs the same nights on held-out
worlds of other shapes (:class:`Shape`): more tasks and baits, a crowded odd history, other
noise, one agent only.

    .venv/bin/python bench/lift.py [--nights 5 --chains 3 --noisy-nights 20 --latency 0.02]
                                   [--seed 7] [--quick] [--json] [--miner llm|heuristic]
                                   [--lookback-hours 0] [--keep] [--chain-noise 0]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lift_world.history import History, Oddities, write_history  # noqa: E402
from lift_world.model import WorldModel  # noqa: E402
from lift_world.skills import SkillSpec, misplaced, true_score_routed  # noqa: E402
from lift_world.world import LIFT, Score, World  # noqa: E402
from support.fake_model_server import FakeModelServer  # noqa: E402

# Model calls per task on the nights that had tasks, measured by this benchmark at commit
# 0c7cf29 (defaults, LLM miner: ~103 mining calls + ~190 learning calls for 24 tasks): the
# reference for "calls per night <= 1.5x today's for the same number of tasks".
TODAY_CALLS_PER_TASK = 11.6
NOISE = 0.2
KEY_ENV = "SKILLOPT_LIFT_KEY"
SEED_SKILL = """---
name: skillopt-sleep-learned
description: How to work in the shop-api project; nights add what they learn.
---

# Shop API working notes

Work in small steps, say what you changed, and keep the answer focused on the request.
"""
SEED_MEMORY = """# shop-api

Backend of the web shop: Python, FastAPI and PostgreSQL. Code lives in src/shop, tests in
tests/, deployment files in deploy/.
"""


@dataclass(frozen=True)
class Shape:
    """The world a run builds: what is true, the history written about it, the noise.

    The default is the lift world; ``bench/lift_variants.py`` runs held-out shapes.
    """

    name: str = "lift"
    world: World = LIFT
    per_task: tuple[int, int] = (3, 5)  # sessions per task (quick: quick_per_task)
    chatter: int = 12  # sessions about nothing the project repeats (quick: quick_chatter)
    quick_per_task: tuple[int, int] = (2, 3)
    quick_chatter: int = 6
    days: float = 21.0
    claude_share: float = 0.6
    odd: Oddities = field(default_factory=Oddities)
    noise: float = NOISE
    noisy_tasks: frozenset[str] | None = None  # ids; None: noise on every task
    skills: tuple[SkillSpec, ...] = ()  # the project's own skills (their sessions load them)

    @property
    def skill_of(self) -> dict[str, str]:
        return {t: s.name for s in self.skills for t in s.tasks}


@dataclass
class Night:
    """What one night did, measured from outside."""

    phase: str
    night: int
    result: str = ""
    exit_code: int = 0
    adopt: str = ""
    solved: int = 0
    total: int = len(LIFT.tasks)
    present: list[str] = field(default_factory=list)
    harmful_adopted: bool = False
    harmful_proposed: int = 0
    accepted_edits: int = 0
    rejected_edits: int = 0
    calls: int = 0
    calls_by_stage: dict[str, int] = field(default_factory=dict)
    world_calls: dict[str, int] = field(default_factory=dict)
    flips: int = 0
    leaks: int = 0  # requests that carried a secret planted in the history
    n_sessions: int = 0
    n_tasks: int = 0
    wall: float = 0.0
    reason: str = ""
    status: dict[str, Any] = field(default_factory=dict)
    superseded: list[dict[str, Any]] = field(default_factory=list)  # report: archive_changes
    # a world with project skills: rules staged where they do not belong, the rules in
    # memory, whether the report's learning curve has tonight's point
    misplaced: list[str] = field(default_factory=list)
    in_memory: list[str] = field(default_factory=list)
    curve_drawn: bool = True

    @property
    def score(self) -> float:
        return self.solved / self.total


@dataclass
class Lab:
    """The fresh HOME, the project, the world server and how to run the CLI in them."""

    root: Path
    shape: Shape
    home: Path
    project: Path
    world_seed: int
    history: History
    model: WorldModel
    server: FakeModelServer
    env: dict[str, str]
    logs: Path

    @property
    def skill(self) -> Path:
        from skillopt_sleep.config import managed_skill_name

        return self.home / ".claude" / "skills" / managed_skill_name(self.project) / "SKILL.md"

    @property
    def memory(self) -> Path:
        return self.project / "CLAUDE.md"

    @property
    def state(self) -> Path:
        return self.home / ".local" / "state" / "skillopt-sleep"

    def cli(self, *args: str, log: str) -> tuple[int, Any]:
        """Run ``python -m skillopt_sleep <args> --json``; (exit code, parsed stdout)."""
        argv = [sys.executable, "-m", "skillopt_sleep", *args, "--project", str(self.project)]
        with (self.logs / f"{log}.stderr").open("w") as err:
            done = subprocess.run(
                [*argv, "--json"], cwd=self.project, env=self.env, stdout=subprocess.PIPE,
                stderr=err, text=True, timeout=900, check=False,
            )  # fmt: skip
        try:
            return done.returncode, json.loads(done.stdout)
        except ValueError:
            return done.returncode, {"ok": False, "message": done.stdout[-500:]}

    def project_skill(self, name: str) -> Path:
        return self.project / ".claude" / "skills" / name / "SKILL.md"

    def skill_texts(self) -> dict[str, str]:
        """Every skill document an agent reads here, the managed one under ``""``."""
        texts = {"": _read(self.skill)}
        texts.update({s.name: _read(self.project_skill(s.name)) for s in self.shape.skills})
        return texts

    def reset(self) -> None:
        """Back to the seed: no state, seed documents (transcripts are only ever read)."""
        shutil.rmtree(self.state, ignore_errors=True)
        self.skill.parent.mkdir(parents=True, exist_ok=True)
        self.skill.write_text(SEED_SKILL, encoding="utf-8")
        self.memory.write_text(SEED_MEMORY, encoding="utf-8")
        for spec in self.shape.skills:
            path = self.project_skill(spec.name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(spec.seed, encoding="utf-8")

    def true_score(self) -> Score:
        world = self.shape.world
        if not self.shape.skills:
            return world.true_score(_read(self.skill), _read(self.memory))
        texts = self.skill_texts()
        return true_score_routed(world, self.shape.skill_of, texts.__getitem__, _read(self.memory))


def write_config(
    home: Path, port: int, *, lookback: float, miner: str, temperature: float | None = None
) -> None:
    """The sleep config: both members serve both roles; ``temperature``: what the target's
    calls send (unset: the provider's default; the fake endpoint ignores it)."""
    sampling = (
        ""
        if temperature is None
        else f"[pool.members.request.target]\ntemperature = {temperature}\n"
    )
    members = [
        f"""[[pool.members]]
kind = "openai"
name = "{name}"
base_url = "http://127.0.0.1:{port}/{name}/v1"
model = "lift-world"
api_key_env = "{KEY_ENV}"
max_concurrency = 8
timeout = 60
{sampling}"""
        for name in ("m0", "m1")
    ]
    text = f"""[sources]
lookback_hours = {lookback}

[night]
llm_mine = {"true" if miner == "llm" else "false"}

{"".join(members)}
[pool.roles]
target = ["m0", "m1"]
optimizer = ["m0", "m1"]
"""
    path = home / ".config" / "skillopt" / "sleep.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def run_night(lab: Lab, phase: str, number: int, *, noise: float, seed: int) -> Night:
    tasks = lab.shape.noisy_tasks
    lab.model.configure(world_seed=lab.world_seed, noise=noise, seed=seed, noisy_tasks=tasks)
    lab.model.take_stats()
    world = lab.shape.world
    night = Night(phase=phase, night=number, total=len(world.tasks))
    began = time.perf_counter()
    code, out = lab.cli("once", log=f"{phase}-{number:02d}-once")
    night.exit_code = code
    night.result = str(out.get("result") or out.get("error") or "error")
    night.reason = str(out.get("reason") or out.get("message") or "")[:200]
    spend = out.get("spend") or {}
    night.calls = int(spend.get("calls") or 0)
    night.calls_by_stage = dict(spend.get("calls_by_stage") or {})
    night.n_sessions = int(out.get("n_sessions") or 0)
    night.n_tasks = int(out.get("n_tasks") or 0)
    report = _report(out)
    run_dir = Path(str(out.get("run_dir") or ""))
    if out.get("run_dir") and run_dir.is_dir():  # kept (with --keep) past the next reset
        shutil.copytree(run_dir, lab.logs / f"{phase}-{number:02d}-run", dirs_exist_ok=True)
    night.superseded = list((report.get("archive_changes") or {}).get("superseded") or [])
    night.accepted_edits = len(report.get("accepted_edits") or [])
    night.rejected_edits = len(report.get("rejected_edits") or [])
    proposed = [e for e in report.get("proposed_edits") or [] if isinstance(e, dict)]
    night.harmful_proposed = sum(world.harmful_in(str(e.get("content", ""))) for e in proposed)
    if lab.shape.skills:
        tonight = [p for p in report.get("chart") or [] if p.get("label") == "← tonight"]
        night.curve_drawn = bool(tonight) and tonight[0].get("score") is not None
    every = ("--all",) if lab.shape.skills else ()
    code, out = lab.cli("adopt", *every, log=f"{phase}-{number:02d}-adopt")
    adopted = out.get("adopted") if code == 0 else None
    night.adopt = f"{len(adopted)} file(s)" if adopted else str(out.get("error") or "nothing")
    night.wall = time.perf_counter() - began
    score = lab.true_score()
    if lab.shape.skills:
        night.misplaced = misplaced(world, lab.skill_texts())
        night.in_memory = sorted(world.conventions_in(_read(lab.memory)))
    night.solved, night.present, night.harmful_adopted = (
        score.solved, sorted(score.present), score.harmful,
    )  # fmt: skip
    stats = lab.model.take_stats()
    secrets = lab.history.secrets
    night.leaks = sum(any(x.encode() in r.raw_body for x in secrets) for r in lab.server.requests)
    lab.server.requests.clear()  # recorded only so the reply function sees the prompt
    night.world_calls, night.flips = stats["calls"], stats["flips"]
    if stats["unknown"]:
        night.reason += f" [world: {len(stats['unknown'])} prompt(s) of unknown kind]"
    return night


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def _report(out: dict[str, Any]) -> dict[str, Any]:
    run_dir = out.get("run_dir")
    path = Path(run_dir) / "report.json" if run_dir else None
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


# --------------------------------------------------------------------------- output

HEADER = (
    f"{'phase':<7} {'night':>5}  {'result':<14} {'true':>11}  {'conventions adopted':<38} "
    f"{'harmful':<9} {'edits a/r':>9} {'calls':>6} {'/task':>6} {'sess':>5} {'tasks':>5} "
    f"{'wall':>7}"
)


def row(n: Night) -> str:
    harm = (
        "ADOPTED"
        if n.harmful_adopted
        else f"prop x{n.harmful_proposed}"
        if n.harmful_proposed
        else "-"
    )
    per_task = f"{n.calls / n.n_tasks:.1f}" if n.n_tasks else "-"
    note = f"  ({n.reason})" if n.exit_code or "[world" in n.reason else ""
    note += f"  SECRET SENT in {n.leaks} request(s)" if n.leaks else ""
    return (
        f"{n.phase:<7} {n.night:>5}  {n.result[:14]:<14} {n.solved:>2}/{n.total} {n.score:5.0%}  "
        f"{' '.join(n.present) or '(none)':<38} {harm:<9} "
        f"{f'{n.accepted_edits}/{n.rejected_edits}':>9} {n.calls:>6} {per_task:>6} "
        f"{n.n_sessions:>5} {n.n_tasks:>5} {n.wall:6.1f}s{note}"
    )


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


@dataclass(frozen=True)
class ChainVerdict:
    line: str
    by_night_3: bool  # >= 92% within 3 nights
    full_by_5: bool  # 100% within 5 nights
    no_harm: bool  # the harmful rule never adopted


def judge_chain(chain: list[Night]) -> ChainVerdict:
    curve = " ".join(f"{n.score:.0%}" for n in chain)
    best3 = max((n.score for n in chain[:3]), default=0.0)
    first_full = next((n.night for n in chain if n.solved == n.total), None)
    harmful = sum(n.harmful_adopted for n in chain)
    full = f"night {first_full}" if first_full else f"not in {len(chain)} nights"
    line = (
        f"{chain[0].phase}: true score by night {curve}; >= 92% by night 3: "
        f"{'yes' if best3 >= 0.92 else 'no'} (best {best3:.0%}); 100%: {full}; harmful "
        f"adopted after {harmful} night(s), proposed {sum(n.harmful_proposed for n in chain)}x"
    )
    return ChainVerdict(
        line=line,
        by_night_3=best3 >= 0.92,
        full_by_5=first_full is not None and first_full <= 5,
        no_harm=not harmful,
    )


def summary(chains: list[list[Night]], noisy: list[Night]) -> list[str]:
    lines: list[str] = []
    verdicts = [judge_chain(c) for c in chains if c]
    kind = "clean" if not chains or not chains[0] or chains[0][0].phase.startswith("clean") else (
        "noisy chains")  # fmt: skip
    if verdicts:
        n = len(verdicts)
        met = [sum(getattr(v, k) for v in verdicts) for k in ("by_night_3", "full_by_5", "no_harm")]
        lines += [v.line for v in verdicts]
        lines += [
            f"{kind}: >= 92% within 3 nights: {verdict(met[0] == n)} ({met[0]}/{n} chains)",
            f"{kind}: 100% within 5 nights: {verdict(met[1] == n)} ({met[1]}/{n} chains)",
            f"{kind}: harmful rule never adopted: {verdict(met[2] == n)} ({met[2]}/{n} chains)",
        ]
    if noisy:
        false_accepts = sum(n.harmful_adopted for n in noisy)
        mean = sum(n.score for n in noisy) / len(noisy)
        lines += [
            f"noisy: harmful accepts: {false_accepts}/{len(noisy)} (target 0): "
            f"{verdict(false_accepts == 0)} (proposed {sum(n.harmful_proposed for n in noisy)}x)",
            f"noisy: mean true score {mean:.1%} (target >= 80%): {verdict(mean >= 0.8)} "
            f"(min {min(n.score for n in noisy):.0%}, max {max(n.score for n in noisy):.0%})",
        ]
    # Clean and noisy nights are priced apart: adaptive sampling is meant to spend where
    # answers disagree, so a clean model pays little and a noisy one pays for its noise.
    for label, group in ((kind, [n for c in chains for n in c]), ("noisy", noisy)):
        worked = [n for n in group if n.n_tasks]
        if not worked:
            continue
        calls = [n.calls for n in group]
        per_task = sum(n.calls for n in worked) / sum(n.n_tasks for n in worked)
        ref = (
            f"today {TODAY_CALLS_PER_TASK:.1f} -> ratio {per_task / TODAY_CALLS_PER_TASK:.2f}"
            + (
                f" (target <= 1.5): {verdict(per_task <= 1.5 * TODAY_CALLS_PER_TASK)}"
                if label == "clean"
                else " (adaptive sampling where answers disagree)"
            )
            if TODAY_CALLS_PER_TASK
            else "no reference recorded"
        )
        lines.append(
            f"{label} calls per night: mean {sum(calls) / len(calls):.0f}, max {max(calls)}; "
            f"calls per task on nights with tasks {per_task:.1f} ({ref})"
        )
    return lines


def skills_summary(chains: list[list[Night]]) -> list[str]:
    """A world with project skills: 100 % within 3 nights, the shared rule in memory,
    nothing misplaced, the learning curve drawn on every night."""
    from lift_world.skills import SHARED

    lines: list[str] = []
    for chain in chains:
        if not chain:
            continue
        by3 = any(n.solved == n.total for n in chain[:3])
        memory = next((n.night for n in chain if SHARED in n.in_memory), None)
        wrong = sorted({m for n in chain for m in n.misplaced})
        drawn = all(n.curve_drawn for n in chain)
        lines += [
            f"{chain[0].phase}: 100% within 3 nights: {verdict(by3)}; shared rule ({SHARED}) "
            f"in memory: {f'from night {memory}' if memory else 'never'} "
            f"{verdict(memory is not None)}; misplaced: {', '.join(wrong) or 'nothing'} "
            f"{verdict(not wrong)}; learning curve drawn every night: {verdict(drawn)}"
        ]
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--nights", type=int, help="chained clean nights (default 5; quick 2)")
    parser.add_argument("--chains", type=int, help="clean chains, world seeds seed.. (3; quick 1)")
    parser.add_argument("--noisy-nights", type=int, help="independent noisy nights (20; quick 2)")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds per model reply")
    parser.add_argument("--seed", type=int, default=7, help="world seed (history and noise)")
    parser.add_argument("--quick", action="store_true", help="a smaller history, fewer nights")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead")
    parser.add_argument("--miner", choices=("llm", "heuristic"), default="llm")
    parser.add_argument("--lookback-hours", type=float, default=0.0, help="0 = all history")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--chain-noise",
        type=float,
        default=0.0,
        help="share of answers flipped in the chained nights too (0 = clean)",
    )
    args = parser.parse_args(argv)
    for name, full, quick in (("nights", 5, 2), ("chains", 3, 1), ("noisy_nights", 20, 2)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    return args


def setup(
    args: argparse.Namespace, root: Path, world_seed: int, server: FakeModelServer,
    model: WorldModel, shape: Shape, now: datetime | None = None,
) -> Lab:  # fmt: skip
    home = root / "home"
    project = home / "work" / "shop-api"
    per_task, chatter = (
        (shape.quick_per_task, shape.quick_chatter) if args.quick
        else (shape.per_task, shape.chatter)
    )  # fmt: skip
    history = write_history(
        home, project, now=now or datetime.now(UTC), seed=world_seed, per_task=per_task,
        noise=chatter, days=shape.days, world=shape.world, claude_share=shape.claude_share,
        odd=shape.odd, skills=shape.skill_of,
    )  # fmt: skip
    write_config(home, server.port, lookback=args.lookback_hours, miner=args.miner)
    env = dict(os.environ)
    env.update(HOME=str(home), PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))  # fmt: skip
    env[KEY_ENV] = "lift-bench-key"
    logs = root / "logs"
    logs.mkdir(parents=True)
    lab = Lab(
        root=root, shape=shape, home=home, project=project, world_seed=world_seed, history=history,
        model=model, server=server, env=env, logs=logs,
    )  # fmt: skip
    lab.reset()
    return lab


def describe(lab: Lab) -> str:
    h = lab.history
    return (
        f"world seed {lab.world_seed}: {h.sessions} sessions ({h.task_sessions} on tasks, "
        f"{h.noise_sessions} noise; {h.claude} Claude Code, {h.codex} Codex; "
        f"{h.older_than_72h} older than 72h, oldest {h.oldest:%Y-%m-%d}"
        + (f"; {h.odd_files} odd file(s), {len(h.secrets)} pasted secret(s)"
           if h.odd_files or h.secrets else "")
        + f") in {h.home}"
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    run(parse_args(argv), Shape())
    return 0


def run(args: argparse.Namespace, shape: Shape) -> list[str]:
    """Run the chained clean and the noisy nights in worlds of ``shape``; the summary."""
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="skillopt-bench-lift-"))
    model = WorldModel(world=shape.world)
    # bodies must be recorded: the reply function reads the prompt from the request
    server = FakeModelServer(latency=args.latency, reply_fn=model.reply)
    chains: list[list[Night]] = []
    noisy: list[Night] = []
    labs: list[Lab] = []
    say = (lambda _: None) if args.json else print
    try:
        server.start()
        for c in range(max(args.chains, 1 if args.noisy_nights else 0)):
            labs.append(setup(args, root / f"world{c + 1}", args.seed + c, server, model, shape))
        w = shape.world
        say(f"world {shape.name}: {len(w.tasks)} tasks, {len(w.conventions)} conventions, "
            f"{sum(bool(t.bait) for t in w.tasks)} bait tasks ({len(w.baits)} harmful rule(s));"
            f" miner {args.miner}, lookback_hours {args.lookback_hours:g}, latency "
            f"{args.latency * 1000:.0f} ms; noise {shape.noise:.0%}"
            + (f" on {len(shape.noisy_tasks)} task(s) only" if shape.noisy_tasks else "")
        )  # fmt: skip
        for lab in labs:
            say(describe(lab))
        seed_score = w.true_score(SEED_SKILL, SEED_MEMORY)
        say(HEADER)
        say(f"{'seed':<7} {0:>5}  {'':<14} {seed_score.solved:>2}/{seed_score.total} "
            f"{seed_score.fraction:5.0%}")  # fmt: skip
        for c, lab in enumerate(labs[: args.chains]):
            chain: list[Night] = []
            phase = f"{'chain' if args.chain_noise else 'clean'}{c + 1}"
            for n in range(1, args.nights + 1):
                seed = args.seed * 1000 + 500 + n  # noisy chains only: other flips than noisy
                night = run_night(lab, phase, n, noise=args.chain_noise, seed=seed)
                if args.json:  # `status` as the user sees it (backlog, archive, ...)
                    _, night.status = lab.cli("status", log=f"clean-{n:02d}-status")
                chain.append(night)
                say(row(night))
            chains.append(chain)
        for n in range(1, args.noisy_nights + 1):
            labs[0].reset()
            night = run_night(labs[0], "noisy", n, noise=shape.noise, seed=args.seed * 1000 + n)
            noisy.append(night)
            say(row(night))
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    wall = time.perf_counter() - started
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = summary(chains, noisy)
    if shape.skills:
        lines += skills_summary(chains)
    if any(lab.history.secrets for lab in labs):
        leaks = sum(n.leaks for n in [*(n for c in chains for n in c), *noisy])
        lines.append(f"pasted secrets sent to a model: {leaks} request(s) (target 0): "
                     f"{verdict(leaks == 0)}")  # fmt: skip
    lines.append(
        f"wall {wall:.1f} s; load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} "
        f"after; CPU: nights (CLI processes) {kids.ru_utime + kids.ru_stime:.1f} s, "
        f"world server + bench {own.ru_utime + own.ru_stime:.1f} s"
    )
    if args.json:
        doc = {
            "args": vars(args),
            "worlds": [
                {
                    "seed": lab.world_seed,
                    **{k: str(v) for k, v in asdict(lab.history).items() if k != "secrets"},
                }
                for lab in labs
            ],
            "nights": [{**asdict(n), "score": n.score} for c in chains for n in c]
            + [{**asdict(n), "score": n.score} for n in noisy],
            "summary": lines,
            "work_dir": str(root) if args.keep else None,
        }
        print(json.dumps(doc, indent=2, default=str))
    else:
        print()
        for line in lines:
            print(line)
        if args.keep:
            print(f"work directory kept: {root}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
