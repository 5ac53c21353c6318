"""What a night costs, next to what it buys: issue 21's targets, each beside today's figure.

Runs nights of ``bench/lift.py`` (its worlds, history writer, CLI path and true score: this
imports them) on the lift world over real HTTP on 127.0.0.1, plus one held-out world of
``bench/lift_variants.py`` (``--variant``, default ``wide``). The fake endpoint reports
usage as a provider would: prompt tokens (characters / 4 of every message), completion
tokens, and the prompt tokens a provider's prefix cache would have served
(``usage.prompt_tokens_details.cached_tokens``; ``tests/support/prompt_cache.py``: blocks
of 128 tokens, prompts of 1024 tokens or more). It also prints the *prefix share*, the
same measure with no minimum length: how much of what was sent repeats a prefix already
sent (how well prompts are laid out for caching, whatever their size).

Nights, each from the seed documents with a fresh state directory unless said:

The target is configured as a user would for each model (the fake endpoint ignores it):
``temperature = 0`` on consistent nights, ``0.8`` on noisy ones, so the spend estimate
before the first call can tell them apart.

- **consistent**: first night, the model answers consistently. Tasks solved by the
  adopted documents (true score, read from the files), calls per task (mining and judging
  included), tokens, cached share; the per-stage ledger from ``report.json``.
- **quiet**: the night after it, no new session (nothing left to learn once 24/24).
- **noisy**: ``--noisy-nights`` first nights with 20 % of answers flipped (default 3; the
  issue's target is over 20): harmful adoptions, mean true score, calls per task.
- **estimate**: the spend printed before the night vs what it spent, on the three kinds.
- **budget**: first nights capped at the consistent night's *floor* (mining, rollouts with
  their judging and the noise probe, reflections: what any learning night spends) plus a
  share of its *testing* spend (everything else), issue 30's definition: at
  ``--budget-share`` (30 %) the night must exit 0 with at least half the uncapped lift, and
  over the sweep ``--budget-sweep`` (15, 30, 60 %) the lift must never fall as the cap rises.
- **variant**: the consistent first night on the held-out world.

Then wall, load average and CPU per call (the CLI processes' CPU over their model calls).

Today's figures (issue 21, 24 tasks / 96 sessions) are printed beside each target. The
baseline this script measured on main at 52e742b (2026-11-27, before the ledger; seed 7,
latency 20 ms, 3 noisy nights; 2 loaded cores, wall 121 s):

    consistent  24/24 solved, 539 calls = 22.5/task (judge 82, mine 101, reflect 5,
                rollout 96, trial 183, union 72), 194,619 tokens; provider-cached 896
                (1 %: few prompts reach 1024 tokens), prefix share 55 %
    quiet       72 calls (rollout 48, judge 24), result no_edits
    noisy x3    0/3 harmful adopted, mean 100 %, 2,717 calls mean (2,375-3,100) = 113/task
    estimate    1,764 calls printed for all three (+227 %, -43 %, +2,350 %)
    budget      --max-calls 162 (30 %): exit 1, failed, lift 0 vs 24
    wide        40/40 solved, 848 calls = 21.2/task, 314,051 tokens
    CPU         27.3 s over 9,773 calls = 3 ms per call
    --quick     consistent 502 calls / 174k tokens, quiet 72, noisy 2,676, budget 151:
                exit 0 budget_reached with lift 0, wide 844 (wall 16 s)

With the ledger, the prompt layout and the other helpers' work of the same afternoon (main
at 16:15, batched mining and quiet nights landed): consistent 24/24 in 446 calls = 18.6/task
(mine 8), 161,475 tokens (87 % of today's), 50 calls that changed no decision (48 of the 96
rollout calls: each task's second dream sample agreed with its first); quiet 48; noisy x3
0 harmful, mean 100 %, 1,777 calls = 74/task, 232 no-decision calls of 5,330; budget 134:
exit 0 budget_reached, lift 0; wide 40/40 in 735 calls; estimate 1,764 calls (tokens priced
at 4.6 M: the token model now prices every call like a batched mining call).

With the target's sampling read from the config (temperature 0 on consistent nights, 0.8 on
noisy ones; main at 40f6d2a, --quick): estimate before any call 446 calls for a 436-call
consistent night (+2 %), 1,941 for a 1,799-call noisy night (+8 %; before: 438, -75 %,
right only after the revision that followed the first rollouts).

At the end of stop 27 (main at c9156cc, --noisy-nights 8, load 1.1-1.8, wall 54 s):
consistent 24/24 in 439 calls = 18.3/task, 162,788 tokens (88 %); quiet 2 (estimated 2);
noisy x8 0 harmful, mean 100 %, 1,785 calls mean (1,204-2,150) = 74/task, estimate within
+-30 % on 6 of 8; budget 132: exit 0 budget_reached, lift 0; wide 40/40 in 716 calls.

At stop 45 (main at 246f908, --quick, load 3.3, wall 48 s), with issue 30's targets and its
budget: consistent 24/24 in 929 calls = 38.7/task; quiet 2; noisy 0 harmful, 141.9/task;
floor 121 of 929, so the 15/30/60 % caps are 242/363/606 calls: lift 0, 6, 6 against 24
uncapped (the 606-call night stopped at 440: the reserve held for its final check is three
rollouts' worth, and the final spent one).

    .venv/bin/python bench/cost.py [--quick] [--noisy-nights 3] [--variant wide]
                                   [--seed 7] [--latency 0.02] [--budget-share 0.3]
                                   [--budget-sweep 0.15,0.3,0.6] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lift import SEED_MEMORY, SEED_SKILL, Lab, Night, Shape, run_night, setup, write_config
from lift import _report as read_report
from lift_variants import SHAPES
from lift_world.model import WorldModel
from support.fake_model_server import FakeModelServer, Reply, Request
from support.prompt_cache import CHARS_PER_TOKEN, PromptCache, prompt_text

BUDGET_ENV = "SKILLOPT_SLEEP__BUDGET__MAX_CALLS"
GREEDY, SAMPLED = 0.0, 0.8  # the target's temperature: consistent nights, noisy nights

# Issue 21's figures for today (24 tasks, 96 sessions, through the real HTTP path).
TODAY = {
    "consistent_calls": 532,
    "consistent_per_task": 22.0,
    "consistent_tokens": 186_000,
    "consistent_stages": "mine 94, rollout 96, judge 48, reflect 5, trial 217, union 72",
    "noisy_calls": 2349,
    "noisy_per_task": 98.0,
    "quiet_calls": 72,
    "estimate": "1,764 for the 532-call night, 1,764 for a 2,507-call night, 856 for 64",
    "budget": "--max-calls 150: failed, exit 1",
}


# --------------------------------------------------------------------------- the endpoint


@dataclass
class Meter:
    """What the endpoint saw since the last take: prompt text sent and what repeated."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # a provider's rule (>= 1024-token prompts)
    prefix_tokens: int = 0  # any prompt: tokens of a prefix already sent

    def take(self) -> Meter:
        out = Meter(**asdict(self))
        self.__init__()  # type: ignore[misc]
        return out


@dataclass
class Endpoint:
    """One world served over HTTP, reporting usage with cached prompt tokens."""

    shape: Shape
    model: WorldModel
    server: FakeModelServer
    meter: Meter
    provider: PromptCache = field(default_factory=PromptCache)
    layout: PromptCache = field(default_factory=lambda: PromptCache(min_tokens=0))


def serve(shape: Shape, latency: float) -> Endpoint:
    model = WorldModel(world=shape.world)
    meter = Meter()
    server = FakeModelServer(latency=latency, reply_fn=model.reply)
    endpoint = Endpoint(shape=shape, model=model, server=server, meter=meter)

    def rule(request: Request) -> Reply:
        text = model.reply(request)
        sent = prompt_text(request.body)
        usage = endpoint.provider.usage(sent)
        prefix = endpoint.layout.usage(sent)
        completion = max(1, len(text) // CHARS_PER_TOKEN)
        meter.requests += 1
        meter.prompt_tokens += usage.prompt_tokens
        meter.completion_tokens += completion
        meter.cached_tokens += usage.cached_tokens
        meter.prefix_tokens += prefix.cached_tokens
        return Reply(
            text=text, usage=(usage.prompt_tokens, completion), cached_tokens=usage.cached_tokens
        )

    server.rule = rule
    server.start()
    return endpoint


# --------------------------------------------------------------------------- one night


@dataclass
class Measured:
    """One night as the user pays for it."""

    kind: str
    night: Night
    tokens: int = 0
    cached_tokens: int = 0  # as the night's own accounting reports it
    estimate_calls: int | None = None
    estimate_tokens: int | None = None
    # said again, the last time: once the first rollouts measured the noise, or a round's
    # reflections the edits proposed (``revised_after`` says which)
    revised_calls: int | None = None
    revised_after: str = ""
    ledger: dict[str, Any] = field(default_factory=dict)
    endpoint: Meter = field(default_factory=Meter)
    cap: int = 0  # the night's --max-calls (0: none)
    share: float = 0.0  # the share of the uncapped testing spend its cap allows

    @property
    def floor_calls(self) -> int:
        """What any learning night spends before it tests an edit: mining, the rollouts
        (their judging and the noise probe included) and reflections, from the ledger."""
        stages = self.ledger.get("stages") or {}
        decisions = self.ledger.get("decisions") or {}
        return sum(
            int((stages.get(name) or {}).get("calls") or 0) for name in ("mine", "reflect")
        ) + int((decisions.get("rollout") or {}).get("calls") or 0)

    @property
    def calls(self) -> int:
        return self.night.calls

    @property
    def per_task(self) -> float | None:
        return self.calls / self.night.total if self.night.total else None


def night(
    lab: Lab, endpoint: Endpoint, kind: str, number: int, *, noise: float, seed: int,
    args: argparse.Namespace,
) -> Measured:  # fmt: skip
    """One night; the target configured as a user would for that model: greedy for the
    consistent one, sampled for the one that flips answers (the fake endpoint ignores it)."""
    temperature = SAMPLED if noise else GREEDY
    write_config(lab.home, lab.server.port, lookback=args.lookback_hours, miner=args.miner,
                 temperature=temperature)  # fmt: skip
    endpoint.meter.take()
    done = run_night(lab, kind, number, noise=noise, seed=seed)
    report = read_report({"run_dir": str(lab.logs / f"{kind}-{number:02d}-run")})
    spend = report.get("spend") or {}
    detail = report.get("estimate_detail") or {}
    return Measured(
        kind=kind,
        night=done,
        tokens=int(spend.get("tokens") or 0),
        cached_tokens=int(spend.get("cached_tokens") or 0),
        estimate_calls=detail.get("calls"),
        revised_calls=(detail.get("revised") or {}).get("calls"),
        revised_after=str((detail.get("revised") or {}).get("after") or "the first rollouts"),
        estimate_tokens=detail.get("tokens"),
        ledger=dict(report.get("ledger") or {}),
        endpoint=endpoint.meter.take(),
    )


# --------------------------------------------------------------------------- output


def pct(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def stages(m: Measured) -> str:
    """Calls per stage: the ledger's model calls (cache hits apart) when the night has one."""
    rows = m.ledger.get("stages") if m.ledger else None
    if isinstance(rows, dict) and rows:
        return ", ".join(
            f"{name} {row.get('calls', 0)}"
            + (f" (+{row['cache_hits']} cached)" if row.get("cache_hits") else "")
            for name, row in rows.items()
        )
    return ", ".join(f"{k} {v}" for k, v in sorted(m.night.calls_by_stage.items()) if v)


def ledger_lines(m: Measured) -> list[str]:
    rows = m.ledger.get("stages") if m.ledger else None
    if not isinstance(rows, dict) or not rows:
        return [f"  (no ledger in report.json) calls by stage: {stages(m)}"]
    out = [
        f"  {'stage':<12} {'calls':>6} {'cache hits':>10} {'tokens':>9} {'cached':>8} "
        f"{'no decision':>11} {'repeats':>7} {'saved':>5}"
    ]
    for name, row in rows.items():
        out.append(
            f"  {name:<12} {row.get('calls', 0):>6} {row.get('cache_hits', 0):>10} "
            f"{row.get('tokens', 0):>9} {row.get('cached_tokens', 0):>8} "
            f"{row.get('no_decision', '-'):>11} {row.get('repeats', '-'):>7} "
            f"{row.get('saved', '-'):>5}"
        )
    return out


def brief(m: Measured) -> str:
    return f"{m.night.solved}/{m.night.total} solved, {m.calls} calls"


def no_decision(group: list[Measured]) -> str:
    if not any(m.ledger for m in group):
        return "- (no ledger)"
    return str(sum(int(m.ledger.get("no_decision") or 0) for m in group))


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def estimate_line(m: Measured) -> str:
    if m.estimate_calls is None:
        return f"  {m.kind:<10} no estimate printed ({m.calls} calls spent)"
    err = (m.estimate_calls - m.calls) / m.calls if m.calls else float("inf")
    tok = ""
    if m.estimate_tokens is not None and m.tokens:
        off = (m.estimate_tokens - m.tokens) / m.tokens
        tok = f"; tokens {m.estimate_tokens} vs {m.tokens} ({off:+.0%})"
    ok = abs(err) <= 0.3
    revised = ""
    if m.revised_calls is not None and m.calls:
        off = (m.revised_calls - m.calls) / m.calls
        revised = f"; revised after {m.revised_after} to {m.revised_calls} ({off:+.0%})"
    return (
        f"  {m.kind:<10} estimated {m.estimate_calls} calls, spent {m.calls} ({err:+.0%}){tok}"
        f" [target +-30%: {verdict(ok)}]{revised}"
    )


def report(
    nights: dict[str, list[Measured]], seed_solved: int, wall: float, load: float
) -> list[str]:
    lines: list[str] = []
    first = nights["consistent"][0]
    n = first.night
    cached = first.endpoint
    lines += [
        "consistent first night (today: 532 calls, 22/task, 186k tokens; target >= 92% solved "
        "in <= 12 calls/task (issue 30), tokens <= 45% of today's):",
        f"  solved {n.solved}/{n.total} ({n.score:.0%}) [>= 92%: {verdict(n.score >= 0.92)}]; "
        f"{n.calls} calls = {first.per_task:.1f}/task "
        f"[<= 12: {verdict((first.per_task or 99) <= 12)}]",
        f"  tokens {first.tokens} = {first.tokens / TODAY['consistent_tokens']:.0%} of today's "
        f"[<= 45%: {verdict(first.tokens <= 0.45 * TODAY['consistent_tokens'])}] (endpoint: "
        f"{cached.prompt_tokens} prompt + "
        f"{cached.completion_tokens} completion); cached {cached.cached_tokens} "
        f"({pct(cached.cached_tokens, cached.prompt_tokens)} of prompt; night's ledger says "
        f"{first.cached_tokens}); prefix share {pct(cached.prefix_tokens, cached.prompt_tokens)}",
        f"  stages: {stages(first)}  (today: {TODAY['consistent_stages']})",
        f"  calls that changed no decision: {no_decision([first])}; that could not change "
        f"one (repeats on a consistent model): {first.ledger.get('repeats', '-')}; saved by "
        f"reading back: {first.ledger.get('saved', '-')} ({first.ledger.get('read_backs', '-')} "
        "samples); ledger:",
        *ledger_lines(first),
    ]
    noisy = nights["noisy"]
    if noisy:
        harmful = sum(m.night.harmful_adopted for m in noisy)
        mean = sum(m.night.score for m in noisy) / len(noisy)
        per_task = sum(m.calls for m in noisy) / sum(m.night.total for m in noisy)
        calls = [m.calls for m in noisy]
        lines += [
            f"20% flips, {len(noisy)} night(s) (today: 2,349 calls mean, ~98/task; target 0 "
            "harmful in 20, mean >= 90%, <= 60 calls/task (issue 30)):",
            f"  harmful adopted {harmful}/{len(noisy)} [{verdict(harmful == 0)}]; mean true "
            f"score {mean:.0%} [{verdict(mean >= 0.9)}]; calls mean {sum(calls) / len(calls):.0f} "
            f"({min(calls)}-{max(calls)}) = {per_task:.1f}/task [{verdict(per_task <= 60)}]",
            f"  stages (first): {stages(noisy[0])}",
            f"  calls that changed no decision: {no_decision(noisy)} of {sum(calls)}; the "
            "first night's ledger:",
            *ledger_lines(noisy[0]),
        ]
    quiet = nights["quiet"][0]
    lines += [
        f"quiet night (today: 72 calls; target <= 5): {quiet.calls} calls, result "
        f"{quiet.night.result} [{verdict(quiet.calls <= 5)}]; stages: {stages(quiet) or 'none'}",
        "estimate vs spend (today: 1,764 printed for a 532-call night):",
        *(estimate_line(m) for m in (first, *noisy, quiet)),
    ]
    budget = nights["budget"]
    if budget:
        lift_uncapped = n.solved - seed_solved
        floor = first.floor_calls
        lines.append(
            f"budget nights (issue 30: cap = floor {floor} + share of the uncapped night's "
            f"testing {first.calls - floor}; today: --max-calls 279 = 30 % of all calls bought "
            "lift 0):"
        )
        lifts: list[int] = []
        for b in sorted(budget, key=lambda m: m.share):
            lift_capped = b.night.solved - seed_solved
            lifts.append(lift_capped)
            aim = ""
            if abs(b.share - 0.3) < 1e-9:
                ok = b.night.exit_code == 0 and lift_capped * 2 >= lift_uncapped
                aim = f" [exit 0 and >= half: {verdict(ok)}]"
            lines.append(
                f"  share {b.share:.0%}: --max-calls {b.cap}: exit {b.night.exit_code}, result "
                f"{b.night.result}, {b.calls} calls; lift {lift_capped} vs uncapped "
                f"{lift_uncapped} tasks{aim}"
            )
        lifts.append(lift_uncapped)  # no cap at all ends the sweep
        rising = all(a <= b for a, b in itertools.pairwise(lifts))
        lines.append(
            f"  lift never falls as the cap rises (uncapped last): {verdict(rising)} {lifts}"
        )
    for m in nights["variant"]:
        v = m.night
        lines.append(
            f"held-out world {m.kind}: first night solved {v.solved}/{v.total} ({v.score:.0%}), "
            f"{v.calls} calls = {m.per_task:.1f}/task, tokens {m.tokens}, harmful adopted "
            f"{v.harmful_adopted}; stages: {stages(m)}"
        )
    everything = [m for group in nights.values() for m in group]
    calls = sum(m.calls for m in everything)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    cpu = kids.ru_utime + kids.ru_stime
    lines.append(
        f"wall {wall:.1f} s; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after; CPU:"
        f" nights {cpu:.1f} s over {calls} calls = {cpu / calls * 1000 if calls else 0:.0f} ms "
        f"per call, endpoint + bench {own.ru_utime + own.ru_stime:.1f} s"
    )
    return lines


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller histories, 1 noisy night")
    parser.add_argument("--noisy-nights", type=int, help="noisy first nights (3; quick 1)")
    parser.add_argument("--variant", default="wide", help=f"held-out world ({', '.join(SHAPES)})")
    parser.add_argument("--seed", type=int, default=7, help="world seed (history and noise)")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds per model reply")
    parser.add_argument(
        "--budget-share", type=float, default=0.3, help="the target's share of testing spend"
    )
    parser.add_argument(
        "--budget-sweep", default="0.15,0.3,0.6", help="shares of testing spend to cap at"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    if args.noisy_nights is None:
        args.noisy_nights = 1 if args.quick else 3
    if args.variant not in SHAPES:
        parser.error(f"unknown variant {args.variant}; choose from {', '.join(SHAPES)}")
    # what bench/lift.py's setup reads
    args.lookback_hours, args.miner = 0.0, "llm"
    return args


def reset_keeping_spend_model(lab: Any) -> None:
    """Back to the seed (a first night again), but with what the project's earlier nights
    taught the spend estimate (``token-model.json``): a user's machine keeps it."""
    kept = {p.relative_to(lab.state): p.read_bytes() for p in lab.state.rglob("token-model.json")}
    lab.reset()
    for rel, data in kept.items():
        (lab.state / rel).parent.mkdir(parents=True, exist_ok=True)
        (lab.state / rel).write_bytes(data)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load = os.getloadavg()[0]
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="skillopt-bench-cost-"))
    say = (lambda _: None) if args.json else (lambda s: print(s, flush=True))
    shape = Shape()
    nights: dict[str, list[Measured]] = {
        k: [] for k in ("consistent", "quiet", "noisy", "budget", "variant")
    }
    endpoints: list[Endpoint] = []
    try:
        lift = serve(shape, args.latency)
        endpoints.append(lift)
        lab = setup(args, root / "lift", args.seed, lift.server, lift.model, shape)
        seed_solved = shape.world.true_score(SEED_SKILL, SEED_MEMORY).solved
        first = night(lab, lift, "consistent", 1, noise=0.0, seed=args.seed, args=args)
        nights["consistent"].append(first)
        say(f"consistent: {brief(first)}, {first.tokens} tokens")
        quiet = night(lab, lift, "quiet", 2, noise=0.0, seed=args.seed, args=args)
        nights["quiet"].append(quiet)
        say(f"quiet: {quiet.calls} calls, {quiet.night.result}")
        for i in range(1, args.noisy_nights + 1):
            reset_keeping_spend_model(lab)
            m = night(
                lab, lift, "noisy", i, noise=shape.noise, seed=args.seed * 1000 + i, args=args
            )
            nights["noisy"].append(m)
            say(f"noisy {i}: {brief(m)}, harmful adopted {m.night.harmful_adopted}")
        floor = first.floor_calls
        shares = sorted({float(x) for x in args.budget_sweep.split(",") if x} | {args.budget_share})
        for i, share in enumerate(shares, start=1):
            cap = max(1, floor + round((first.calls - floor) * share))
            reset_keeping_spend_model(lab)
            lab.env[BUDGET_ENV] = str(cap)
            try:
                b = night(lab, lift, "budget", i, noise=0.0, seed=args.seed, args=args)
            finally:
                lab.env.pop(BUDGET_ENV, None)
            b.cap, b.share = cap, share
            nights["budget"].append(b)
            say(
                f"budget {cap} ({share:.0%}): exit {b.night.exit_code}, {b.night.result}, "
                f"{brief(b)}"
            )
        vshape = SHAPES[args.variant]
        held = serve(vshape, args.latency)
        endpoints.append(held)
        vlab = setup(args, root / args.variant, args.seed, held.server, held.model, vshape)
        v = night(vlab, held, args.variant, 1, noise=0.0, seed=args.seed, args=args)
        nights["variant"].append(v)
    finally:
        for e in endpoints:
            e.server.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    lines = report(nights, seed_solved, time.perf_counter() - started, load)
    if args.json:
        doc = {
            "args": vars(args),
            "nights": {
                k: [{**asdict(m), "score": m.night.score} for m in group]
                for k, group in nights.items()
            },
            "summary": lines,
        }
        print(json.dumps(doc, indent=2, default=str))
    else:
        print()
        for line in lines:
            print(line)
        if args.keep:
            print(f"work directory kept: {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
