"""Benchmark: 200 attempts through the codex CLI member at concurrency 8, fake latency 500 ms.

Bound = ceil(N / C) x (latency + codex's own start-up cost measured alone). The ratio
wall / bound should stay <= 1.3. Runs in a private network namespace when permitted; skips
(exit 0, with the reason) when the codex CLI is not installed (``make tools``).

    .venv/bin/python bench/cli_pool.py [--attempts 200] [--concurrency 8] [--latency 0.5]
                                       [--executable PATH] [--strict]
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from figures import Load, print_figures  # noqa: E402
from skillopt.backends.base import CompletionRequest, Role  # noqa: E402
from skillopt.backends.cli.common import CliKind, CliSpec  # noqa: E402
from skillopt.backends.cli.member import CliBackend  # noqa: E402
from skillopt.logging import configure_logging  # noqa: E402
from support.fake_agent_server import FakeAgentServer  # noqa: E402
from support.netns import private_network  # noqa: E402

TARGET = 1.3


def find_codex() -> str | None:
    local = ROOT / ".tools" / "bin" / "codex"
    return str(local) if local.exists() else shutil.which("codex")


def member(executable: str, url: str, home: Path, concurrency: int) -> CliBackend:
    spec = CliSpec(
        kind=CliKind.CODEX,
        name="bench-codex",
        executable=executable,
        model="fake-model",
        isolated_home=True,
        home_dir=home / "codex",
        provider_base_url=f"{url}/v1",
        provider_key_env="FAKE_LLM_KEY",
        timeout=60,
        max_concurrency=concurrency,
    )
    environ = {
        "PATH": f"{Path(executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home / "user"),
        "FAKE_LLM_KEY": "dummy",
    }
    return CliBackend(spec, environ=environ, scratch_root=home / "scratch")


async def measure(args: argparse.Namespace, executable: str, server: FakeAgentServer) -> int:
    home = Path(tempfile.mkdtemp(prefix="skillopt-bench-"))
    try:
        backend = member(executable, server.base_url, home, args.concurrency)
        await backend.complete(CompletionRequest(role=Role.TARGET, prompt="warm up"))
        alone = []
        for i in range(5):
            started = time.monotonic()
            await backend.complete(CompletionRequest(role=Role.TARGET, prompt=f"alone {i}"))
            alone.append(time.monotonic() - started)
        startup = statistics.median(alone)

        server.script.latency = args.latency
        server.reset()
        failures: list[str] = []

        async def one(i: int) -> None:
            try:
                out = await backend.complete(
                    CompletionRequest(role=Role.TARGET, prompt=f"attempt {i} FAKE_REPLY[r{i}]")
                )
                if out.text.strip() != f"r{i}":
                    failures.append(f"attempt {i}: wrong reply {out.text!r}")
            except Exception as exc:  # a benchmark reports every failure, whatever its type
                failures.append(f"attempt {i}: {exc}")

        load = Load()
        self_before = resource.getrusage(resource.RUSAGE_SELF)
        kids_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            for i in range(args.attempts):
                tg.start_soon(one, i)
        wall = time.monotonic() - started
        own_cpu = _cpu(resource.getrusage(resource.RUSAGE_SELF)) - _cpu(self_before)
        cli_cpu = _cpu(resource.getrusage(resource.RUSAGE_CHILDREN)) - _cpu(kids_before)
    finally:
        shutil.rmtree(home, ignore_errors=True)

    bound = math.ceil(args.attempts / args.concurrency) * (args.latency + startup)
    ratio = wall / bound
    print(f"executable: {executable}")
    print(
        f"codex member: {args.attempts} attempts, concurrency {args.concurrency}, "
        f"latency {args.latency:.3f}s, start-up alone {startup:.3f}s (median of 5)"
    )
    # the CLI processes' CPU counts against the cores too: it is work this run needed
    print_figures(wall=wall, bound=bound, cpu=own_cpu + cli_cpu, calls=args.attempts,
                  load=load, target=TARGET)  # fmt: skip
    print(
        f"cpu: ours {own_cpu / args.attempts * 1000:.1f} ms/call, "
        f"codex {cli_cpu / args.attempts * 1000:.1f} ms/call"
    )
    print(f"server max in flight {server.max_in_flight} (limit {args.concurrency})")
    if failures:
        print(f"{len(failures)} failures, first: {failures[0]}")
        return 1
    if server.max_in_flight > args.concurrency:
        print("FAIL: member exceeded its concurrency limit")
        return 1
    verdict = "PASS" if ratio <= TARGET else "OVER TARGET"
    print(verdict)
    return 1 if (args.strict and ratio > TARGET) else 0


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--attempts", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--strict", action="store_true", help="exit 1 when over the target")
    parser.add_argument("--executable", help="codex to drive (default: .tools/bin/codex, PATH)")
    args = parser.parse_args()
    configure_logging(level="WARNING")  # one debug line per call would drown the figures
    executable = os.path.abspath(args.executable) if args.executable else find_codex()
    if executable is None:
        print("skipped: codex CLI not installed (run `make tools`; needs npm)")
        return 0
    with private_network() as (entered, why):
        print(f"network: {why}" if entered else f"network: current namespace ({why})")
        with FakeAgentServer() as server:
            return anyio.run(measure, args, executable, server)


if __name__ == "__main__":
    sys.exit(main())
