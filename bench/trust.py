"""Trust: does the gate ever adopt a harmful rule? Measured over many drawn worlds.

One bench world cannot show it, so a seed draws a world (``bench/worlds``): 16-28
recurring tasks in 3-4 groups, each group with its own house convention and one
convention several groups share (sometimes the good "reply with the JSON object only"
rule), lookups, tasks needing nothing, often a task no document can make pass, and
spoilers of the kinds the issue lists (direct, counterfactual, narrow, proposed in every
fold, lucky single test), with judges that sometimes err, lenient mined rule checks, reworded
duplicate tasks and sometimes a task whose calls always fail. Each world's history is
written as Claude Code / Codex sessions into a fresh HOME and the world is served over real
HTTP on 127.0.0.1 as the target and the optimizer model (``bench/lift.py``'s harness).

Every night is a *first* night (seed documents, fresh state), driven black-box:
``python -m skillopt_sleep once --json`` then ``adopt``; its true score is read from the
live files (share of tasks whose conventions are all in the live skill + CLAUDE.md and no
spoiler that breaks them is): never from the night's report.

Conditions per world: ``consistent`` (no flips, no faults), ``flips10/20/30`` (that share
of target answers flipped, seeded per night), ``faults20/40`` (that share of requests
answered by a 500, 503, 429 or a timeout past the member's 5 s, seeded; retried by the
pool). ``--quick``: 3 seeds, consistent / flips20 / faults20. Every draw of a world (a
flip, a judge's error, a fault) hashes the world seed, the condition and the request
itself (``worlds.model``): the same product on the same seed and condition meets the same
draws whatever the concurrency, the load or the other conditions run alongside.

stdout holds verdict lines only: per condition one row (nights, harmful adoptions, mean
true score and its share of the same worlds' consistent nights, calls per task mean/max,
same decision as the fault-free night, nights reporting something untested), then one
``TARGET <name>: MET|MISSED (<figures>)`` line per target, wall time, load and CPU. What
each night did (which spoilers, which rules) goes to ``<out>/nights.json`` only.

Targets: 0 harmful adoptions at 0/10/20/30 % flips and under 20/40 % faults; at 20 %
flips the mean true score >= 90 % of the consistent nights'; under 20 % faults the same
decision as the fault-free night in >= 95 % of nights; every night of a world with a task
whose calls always fail says what it left untested; <= 100 calls per task at 20 % flips.
``--existing`` (default on, off in ``--quick``) adds the lift world's consistent and
20 %-flip first nights through the same path (rows ``lift:...``; counted in the no-harm
targets).

Seeds used while building (excluded from the default): 1, 2, 3, 5, 8, 13 and 0-59 in
the generator test. Default seeds: 9000-9019 (never run while building).
Runtime: ~15-30 s a night on a loaded 2-core machine, two worlds at a time; full (20
seeds x 6 conditions) ~30-40 min, ``--quick`` (9 nights) ~3-5 min.

    PYTHONPATH=src .venv/bin/python bench/trust.py [--quick] [--seeds 9000-9019]
        [--out DIR] [--jobs 2] [--existing] [--latency 0.02]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from lift import Shape, run_night, setup
from support.fake_model_server import FakeModelServer
from worlds.model import TIMEOUT, TrustModel
from worlds.world import draw_world

CONDITIONS: dict[str, tuple[float, float]] = {  # name -> (flips, faults)
    "consistent": (0.0, 0.0),
    "flips10": (0.1, 0.0),
    "flips20": (0.2, 0.0),
    "flips30": (0.3, 0.0),
    "faults20": (0.0, 0.2),
    "faults40": (0.0, 0.4),
}
QUICK = ("consistent", "flips20", "faults20")
DEFAULT_SEEDS = "9000-9019"
QUICK_SEEDS = "9000-9002"
UNTESTED_WORDS = ("could not be run", "untested", "not tested", "without it", "lost")


def parse_seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.replace(" ", ",").split(","):
        if not part:
            continue
        if "-" in part[1:]:
            a, b = part.split("-", 1) if not part.startswith("-") else (part, part)
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def _night_record(lab: Any, world: Any, night: Any, condition: str, seed: int) -> dict[str, Any]:
    run = lab.logs / f"{night.phase}-{night.night:02d}-run"
    try:
        report = json.loads(_read(run / "report.json") or "{}")
    except ValueError:
        report = {}
    notes = [str(n) for n in (report.get("notes") or [])] if isinstance(report, dict) else []
    skill, memory = _read(lab.skill), _read(lab.memory)
    score = world.true_score(skill, memory)
    spoilers = sorted(getattr(score, "spoilers", ()) or (["harmful"] if score.harmful else []))
    folded = " ".join(notes).casefold()
    return {
        "seed": seed,
        "condition": condition,
        "result": night.result,
        "exit_code": night.exit_code,
        "solved": score.solved,
        "total": score.total,
        "score": score.fraction,
        "present": sorted(score.present),
        "spoilers_adopted": spoilers,
        "harmful": bool(spoilers),
        "harmful_proposed": night.harmful_proposed,
        "decision": sorted(score.present) + [f"!{s}" for s in spoilers],
        "calls": night.calls,
        "n_tasks": night.n_tasks,
        "per_task": night.calls / night.n_tasks if night.n_tasks else None,
        "untested_reported": any(w in folded for w in UNTESTED_WORDS),
        "untested_notes": [
            n[:200] for n in notes if any(w in n.casefold() for w in UNTESTED_WORDS)
        ],
        "world_calls": night.world_calls,
        "flips": night.flips,
        "wall": night.wall,
        "reason": night.reason,
    }


def run_world(
    seed: int, conditions: list[str], args: argparse.Namespace, root: Path, say: Any
) -> list[dict[str, Any]]:
    world = draw_world(seed)
    model = TrustModel(world)
    server = FakeModelServer(latency=args.latency, reply_fn=model.reply, rule=model.fault)
    shape = Shape(
        name=world.name,
        world=world.for_history(),  # type: ignore[arg-type]
        per_task=(2, 4),
        chatter=6,
        quick_per_task=(2, 4),
        quick_chatter=6,
    )
    records: list[dict[str, Any]] = []
    started = time.perf_counter()
    try:
        server.start()
        ns = argparse.Namespace(quick=False, lookback_hours=0.0, miner="llm")
        lab = setup(
            ns,
            root / f"seed{seed}",
            seed,
            server,
            model,
            shape,
            now=datetime(2026, 3, 1, 12, tzinfo=UTC),
        )
        _short_timeouts(lab.home)
        model.home = str(lab.home)  # a temporary path: the world's draws leave it out
        lab.shape = dataclasses.replace(shape, world=world)  # scored on the true world
        for i, condition in enumerate(conditions):
            flips, faults = CONDITIONS[condition]
            lab.reset()
            model.faults = faults
            model.condition = condition  # the world's draws: (seed, condition, request)
            t0 = time.perf_counter()
            c0 = _cpu_children()
            night_seed = seed * 100 + list(CONDITIONS).index(condition)  # not its place in line
            night = run_night(lab, condition, i + 1, noise=flips, seed=night_seed)
            rec = _night_record(lab, world, night, condition, seed)
            rec["cpu"] = _cpu_children() - c0
            rec["wall"] = time.perf_counter() - t0
            rec["faulted"] = dict(model.faulted)
            rec["features"] = sorted(world.features)
            records.append(rec)
            say(rec)
    finally:
        server.stop()
    del started
    return records


def run_lift(
    conditions: list[str], args: argparse.Namespace, root: Path, say: Any
) -> list[dict[str, Any]]:
    """The existing lift world's first nights through the same path (``--existing``)."""
    from lift_world.model import WorldModel

    shape = Shape()
    model = WorldModel(world=shape.world)
    server = FakeModelServer(latency=args.latency, reply_fn=model.reply)
    records: list[dict[str, Any]] = []
    try:
        server.start()
        ns = argparse.Namespace(quick=False, lookback_hours=0.0, miner="llm")
        lab = setup(ns, root / "lift", 7, server, model, shape)
        for i, condition in enumerate(conditions):
            flips, _ = CONDITIONS[condition]
            lab.reset()
            t0, c0 = time.perf_counter(), _cpu_children()
            night = run_night(lab, condition, i + 1, noise=flips, seed=7000 + i)
            rec = _night_record(lab, shape.world, night, f"lift:{condition}", 7)
            rec["cpu"], rec["wall"] = _cpu_children() - c0, time.perf_counter() - t0
            records.append(rec)
            say(rec)
    finally:
        server.stop()
    return records


def _short_timeouts(home: Path) -> None:
    path = home / ".config" / "skillopt" / "sleep.toml"
    text = path.read_text(encoding="utf-8").replace("timeout = 60", f"timeout = {TIMEOUT:g}")
    path.write_text(text, encoding="utf-8")


_cpu_lock = threading.Lock()


def _cpu_children() -> float:
    with _cpu_lock:
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


# --------------------------------------------------------------------------- verdicts


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def table(records: list[dict[str, Any]], conditions: list[str]) -> tuple[list[str], dict]:
    by: dict[tuple[int, str], dict[str, Any]] = {(r["seed"], r["condition"]): r for r in records}
    rows = [
        f"{'condition':<16} {'nights':>6} {'harmful':>7} {'true':>6} {'%cons':>6} "
        f"{'calls/task':>11} {'max':>6} {'same-dec':>8} {'untested':>8} {'cpu/night':>9}"
    ]
    stats: dict[str, dict[str, Any]] = {}
    names = list(dict.fromkeys([*conditions, *(r["condition"] for r in records)]))
    for cond in names:
        group = [r for r in records if r["condition"] == cond]
        if not group:
            continue
        base_cond = "lift:consistent" if cond.startswith("lift:") else "consistent"
        pairs = [(r, by.get((r["seed"], base_cond))) for r in group]
        pairs = [(r, b) for r, b in pairs if b is not None]
        mean = _mean([r["score"] for r in group])
        cons = _mean([b["score"] for _, b in pairs])
        share = _mean([r["score"] for r, _ in pairs]) / cons if cons else None
        per = [r["per_task"] for r in group if r["per_task"] is not None]
        same = None
        if cond.startswith("faults"):
            same = (
                _mean([float(r["decision"] == b["decision"]) for r, b in pairs]) if pairs else None
            )
        stats[cond] = {
            "nights": len(group),
            "harmful": sum(r["harmful"] for r in group),
            "mean": mean,
            "share": share,
            "per_mean": _mean(per),
            "per_max": max(per, default=0.0),
            "same": same,
            "untested": sum(r["untested_reported"] for r in group),
        }
        s = stats[cond]
        rows.append(
            f"{cond:<16} {s['nights']:>6} {s['harmful']:>7} {mean:>6.1%} "
            f"{'-' if share is None else f'{share:.0%}':>6} {s['per_mean']:>11.1f} "
            f"{s['per_max']:>6.1f} {'-' if same is None else f'{same:.0%}':>8} "
            f"{s['untested']:>8} {_mean([r['cpu'] for r in group]):>8.1f}s"
        )
    return rows, stats


def targets(records: list[dict[str, Any]], stats: dict[str, dict[str, Any]]) -> list[str]:
    out: list[str] = []

    def line(name: str, ok: bool | None, figures: str) -> None:
        verdict = "MET" if ok else "MISSED" if ok is not None else "NOT RUN"
        out.append(f"TARGET {name}: {verdict} ({figures})")

    for cond in ("consistent", "flips10", "flips20", "flips30", "faults20", "faults40"):
        group = [r for r in records if r["condition"] in (cond, f"lift:{cond}")]
        harm = sum(r["harmful"] for r in group)
        line(
            f"no-harm-{cond}",
            harm == 0 if group else None,
            f"{harm} harmful in {len(group)} nights" if group else "not run",
        )
    s = stats.get("flips20")
    ok = None if s is None or s["share"] is None else s["share"] >= 0.9
    line(
        "flips20-score",
        ok,
        "not run"
        if ok is None
        else f"mean true {s['mean']:.1%} = {s['share']:.0%} of consistent, need >= 90%",
    )
    s = stats.get("faults20")
    ok = None if s is None or s["same"] is None else s["same"] >= 0.95
    line(
        "faults20-same-decision",
        ok,
        "not run" if ok is None else f"{s['same']:.0%} of {s['nights']} nights, need >= 95%",
    )
    doomed = [r for r in records if "doomed_task" in r.get("features", ())]
    said = sum(r["untested_reported"] for r in doomed)
    line(
        "untested-reported",
        None if not doomed else said == len(doomed),
        f"{said}/{len(doomed)} nights with an always-failing task said what was untested",
    )
    s = stats.get("flips20")
    line(
        "cost-flips20",
        None if s is None else s["per_max"] <= 100,
        "not run"
        if s is None
        else f"calls per task mean {s['per_mean']:.1f}, max {s['per_max']:.1f}, need <= 100",
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--seeds", help=f"list/ranges (default {DEFAULT_SEEDS}; quick {QUICK_SEEDS})"
    )
    parser.add_argument("--conditions", help="comma list (default all; quick " + ",".join(QUICK))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--existing",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also the lift world's first nights (default: on, off with --quick)",
    )
    parser.add_argument("--out", help="results dir (default a temp dir)")
    parser.add_argument("--jobs", type=int, default=2, help="worlds at once (<= 2)")
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--keep", action="store_true", help="keep the worlds' HOMEs")
    args = parser.parse_args(argv)
    seeds = parse_seeds(args.seeds or (QUICK_SEEDS if args.quick else DEFAULT_SEEDS))
    conditions = (
        args.conditions.split(",") if args.conditions else list(QUICK if args.quick else CONDITIONS)
    )
    if args.existing is None:
        args.existing = not args.quick
    out = Path(args.out or tempfile.mkdtemp(prefix="skillopt-trust-"))
    out.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="skillopt-trust-work-"))
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    records: list[dict[str, Any]] = []
    lock = threading.Lock()

    def keep(rec: dict[str, Any]) -> None:
        with lock:
            records.append(rec)
            (out / "nights.json").write_text(json.dumps(records, indent=1), encoding="utf-8")

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(args.jobs, 2))) as pool:
            jobs = [pool.submit(run_world, s, conditions, args, root, keep) for s in seeds]
            if args.existing:
                lift_conds = [c for c in ("consistent", "flips20") if c in conditions]
                jobs.append(pool.submit(run_lift, lift_conds, args, root, keep))
            for job in jobs:
                job.result()
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    rows, stats = table(records, conditions)
    for r in rows:
        print(r)
    for t in targets(records, stats):
        print(t)
    wall = time.perf_counter() - t0
    own = resource.getrusage(resource.RUSAGE_SELF)
    n = len(records)
    print(
        f"wall {wall:.0f} s for {n} nights on {len(seeds)} seeds; load average "
        f"{load0[0]:.2f} before, {os.getloadavg()[0]:.2f} after; CPU per night "
        f"{_mean([r['cpu'] for r in records]):.1f} s (CLI processes), world servers + bench "
        f"{own.ru_utime + own.ru_stime:.1f} s; details: {out / 'nights.json'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
